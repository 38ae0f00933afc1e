#!/usr/bin/python3
"""Checks deploy/monitoring against the metrics the code exports.

Every PromQL expression in the Grafana dashboard and the rule files may reference only
  - tessera_* metrics registered in common/metrics, coordinator/metrics or worker/metrics
    (histograms only through their _bucket/_sum/_count series),
  - tessera:* recording rules defined in recording_rules.yml, and
  - job="..." values that both deployments give their targets: a job_name of
    prometheus.yml (static scraping) and a tessera.dev/metrics-job label of the Helm
    chart's Services, which its ServiceMonitors use as jobLabel.
Usage: check_monitoring.py SOURCE_DIR [DASHBOARD_JSON]
"""
import json
import pathlib
import re
import sys

import yaml

METRIC_DIRS = ["common/metrics", "coordinator/metrics", "worker/metrics"]
KINDS = {
    "histogram": [r'Hist\(r,\s*"(tessera_\w+)"', r'BuildHistogram\(\)\s*\.Name\(\s*"(tessera_\w+)"'],
    "counter": [r'Count\(r,\s*"(tessera_\w+)"', r'BuildCounter\(\)\s*\.Name\(\s*"(tessera_\w+)"',
                r'Family\(\s*"(tessera_\w+)"[^;]*MetricType::Counter'],
    "gauge": [r'Gauge\(r,\s*"(tessera_\w+)"', r'BuildGauge\(\)\s*\.Name\(\s*"(tessera_\w+)"',
              r'Family\(\s*"(tessera_\w+)"[^;]*MetricType::Gauge'],
}


def exported_series(root):
    """Series names a scrape can contain, from the registration calls in the source."""
    kinds = {}
    literals = set()
    for d in METRIC_DIRS:
        for path in sorted((root / d).glob("*.cc")):
            text = path.read_text()
            literals.update(re.findall(r'"(tessera_\w+)"', text))
            for kind, patterns in KINDS.items():
                for p in patterns:
                    for name in re.findall(p, text, flags=re.S):
                        kinds[name] = kind
    unknown = literals - set(kinds)
    if unknown:
        sys.exit(f"FAIL: metric names in the source whose type this check cannot tell: {sorted(unknown)}")
    if not kinds:
        sys.exit(f"FAIL: no metric registrations found under {root}")
    series = set()
    for name, kind in kinds.items():
        if kind == "histogram":
            series.update({name + "_bucket", name + "_sum", name + "_count"})
        else:
            series.add(name)
    return series


def strip_strings(expr):
    # Label values ("tessera-worker") and legend text are not metric names.
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def job_names(root, monitoring):
    """Job names of the static scrape config, and of the chart's ServiceMonitor targets."""
    config = yaml.safe_load((monitoring / "prometheus.yml").read_text())
    static = {c["job_name"] for c in config.get("scrape_configs", [])}
    templates = root / "helm" / "tessera" / "templates"
    monitor = (templates / "servicemonitor.yaml").read_text()
    if not re.search(r"^\s*jobLabel:\s*tessera\.dev/metrics-job\s*$", monitor, flags=re.M):
        sys.exit("FAIL: helm ServiceMonitor does not set jobLabel: tessera.dev/metrics-job, so its targets' "
                 "job is the Service name and job=\"...\" selectors in the dashboard and rules miss them")
    chart = set()
    for path in sorted(templates.glob("*.yaml")):
        chart.update(re.findall(r"tessera\.dev/metrics-job:\s*([\w.-]+)", path.read_text()))
    return static, chart


def check_jobs(where, expr, jobs, errors):
    static, chart = jobs
    for op, value in re.findall(r'\bjob\s*(=~|!=|!~|=)\s*"([^"]*)"', expr):
        if op != "=":
            errors.append(f"{where}: job{op}\"{value}\": select jobs by exact name in: {expr.strip()}")
        elif value not in static or value not in chart:
            errors.append(f"{where}: job \"{value}\" is not a job of both prometheus.yml {sorted(static)} "
                          f"and the chart's ServiceMonitors {sorted(chart)} in: {expr.strip()}")


def check(where, expr, series, records, errors, jobs=None):
    if jobs is not None:
        check_jobs(where, expr, jobs, errors)
    body = strip_strings(expr)
    for name in re.findall(r'\btessera_\w+', body):
        if name not in series:
            errors.append(f"{where}: unknown metric {name} in: {expr.strip()}")
    for name in re.findall(r'\btessera:[\w:]+', body):
        if name not in records:
            errors.append(f"{where}: undefined recording rule {name} in: {expr.strip()}")


def main():
    root = pathlib.Path(sys.argv[1])
    monitoring = root / "deploy" / "monitoring"
    dashboard_path = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else monitoring / "grafana_dashboard.json"
    series = exported_series(root)
    jobs = job_names(root, monitoring)
    errors = []

    rules = {}
    for name in ["recording_rules.yml", "alert_rules.yml"]:
        rules[name] = yaml.safe_load((monitoring / name).read_text())
    records = {r["record"] for g in rules["recording_rules.yml"]["groups"] for r in g["rules"] if "record" in r}
    for file, doc in rules.items():
        for g in doc["groups"]:
            for r in g["rules"]:
                check(f"{file}:{r.get('record') or r.get('alert')}", r["expr"], series, records, errors, jobs)

    try:
        dashboard = json.loads(dashboard_path.read_text())
    except json.JSONDecodeError as e:
        sys.exit(f"FAIL: {dashboard_path} is not valid JSON: {e}")
    exprs = 0

    def walk(node, where):
        nonlocal exprs
        if isinstance(node, dict):
            title = node.get("title", where)
            for key, value in node.items():
                if key in ("expr", "query") and isinstance(value, str):
                    exprs += 1
                    check(f"{dashboard_path.name}:{title}", value, series, records, errors, jobs)
                else:
                    walk(value, title)
        elif isinstance(node, list):
            for item in node:
                walk(item, where)

    walk(dashboard, "dashboard")
    if not dashboard.get("panels"):
        errors.append(f"{dashboard_path}: no panels")
    if exprs == 0:
        errors.append(f"{dashboard_path}: no PromQL expressions")
    if errors:
        print("\n".join("FAIL: " + e for e in errors))
        sys.exit(1)
    print(f"ok: {exprs} dashboard expressions and {sum(len(g['rules']) for d in rules.values() for g in d['groups'])} "
          f"rules reference only the {len(series)} exported series and {len(records)} recording rules")


if __name__ == "__main__":
    main()
