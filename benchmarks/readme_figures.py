#!/usr/bin/env python3
"""Helper of readme_figures.sh (standard library only).

  readme_figures.py ports N                   first of N consecutive free loopback ports
  readme_figures.py ready PORT                exit 0 when http://127.0.0.1:PORT/readyz answers 200
  readme_figures.py rank0-forward PORT...     rank 0's forward and step counters (worker /metrics)
  readme_figures.py worker-memory PID         /proc/<pid>/status of each tessera-worker child of PID
  readme_figures.py write FIGURE WORK OUT [KEY=VALUE...]
                                              FIGURE's raw samples in WORK, with conditions, to OUT

WORK holds what the shell script recorded for one figure: date_utc, loadavg_before,
loadavg_after, commands.txt (one shell-quoted command a line), samples.jsonl and, for the
Google Benchmark figures, benchmark.json. KEY=VALUE pairs become "parameters".
"""
import json
import os
import pathlib
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------- probes

def free_ports(n):
    """A base port b with b .. b+n-1 free: `tessera serve` derives its cluster and per-worker
    metrics ports from --port and --metrics-port, so they must be consecutive."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - n)
        try:
            socks = []
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    sys.exit("readme_figures.py: no run of %d free loopback ports" % n)


def http_get(port, path, timeout=5):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.read().decode()


METRIC_LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)')
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text format to [(name, {label: value}, float)]."""
    out = []
    for line in text.splitlines():
        m = METRIC_LINE.match(line)
        if m and not line.startswith("#"):
            out.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


def metric(samples, name, **labels):
    for n, l, v in samples:
        if n == name and all(l.get(k) == v2 for k, v2 in labels.items()):
            return v
    return None


def worker_view(port):
    """What a worker's /metrics says about its place and its forward passes."""
    samples = parse_metrics(http_get(port, "/metrics")[1])
    info = next((l for n, l, _ in samples if n == "tessera_worker_info"), {})
    return {
        "metrics_port": port,
        "rank": int(info["rank"]) if "rank" in info else None,
        "replica": int(info["replica"]) if "replica" in info else None,
        "world_size": int(info["world_size"]) if "world_size" in info else None,
        "forward_seconds_sum": metric(samples, "tessera_worker_forward_seconds_sum"),
        "forward_seconds_count": metric(samples, "tessera_worker_forward_seconds_count"),
        "decode_step_seconds_sum": metric(samples, "tessera_worker_step_duration_seconds_sum", phase="decode"),
        "decode_step_seconds_count": metric(samples, "tessera_worker_step_duration_seconds_count", phase="decode"),
        "weight_bytes": metric(samples, "tessera_worker_weight_bytes"),
        "kv_cache_bytes": metric(samples, "tessera_worker_kv_cache_bytes"),
    }


def rank0_forward(ports):
    views = [worker_view(p) for p in ports]
    for v in views:
        if v["rank"] == 0 and v["replica"] in (0, None):
            return v
    sys.exit(f"readme_figures.py: no rank 0 among workers on ports {ports}: {views}")


STATUS_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "VmSize", "Threads")


def worker_memory(parent):
    """Each tessera-worker child of `parent` (tessera serve forks them directly): its memory
    from /proc/<pid>/status in bytes, and its rank and weight bytes from its /metrics."""
    workers = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            # comm may hold spaces and parentheses; the fields after the last ')' do not.
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid != parent or comm != "tessera-worker":
                continue
            status = (proc / "status").read_text()
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue  # It exited while we looked.
        w = {"pid": int(proc.name)}
        for line in status.splitlines():
            key, _, value = line.partition(":")
            if key in STATUS_FIELDS:
                parts = value.split()
                w[key if key == "Threads" else key + "_bytes"] = (
                    int(parts[0]) * 1024 if len(parts) > 1 and parts[1] == "kB" else int(parts[0]))
        args = [a.decode() for a in argv]
        if "--metrics-port" in args:
            port = int(args[args.index("--metrics-port") + 1])
            if port > 0:
                try:
                    v = worker_view(port)
                    w.update({k: v[k] for k in ("metrics_port", "rank", "world_size", "weight_bytes",
                                                "kv_cache_bytes")})
                except OSError as e:
                    w["metrics_error"] = str(e)
        workers.append(w)
    return sorted(workers, key=lambda w: (w.get("rank") is None, w.get("rank"), w["pid"]))


# ----------------------------------------------------------------------------- conditions

def read(path, default=""):
    try:
        return pathlib.Path(path).read_text()
    except OSError:
        return default


def capture(*cmd):
    try:
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine():
    cpuinfo = read("/proc/cpuinfo")
    model = next((l.split(":", 1)[1].strip() for l in cpuinfo.splitlines() if l.startswith("model name")),
                 "unknown")
    flags = next((l.split(":", 1)[1].split() for l in cpuinfo.splitlines() if l.startswith("flags")), [])
    mem = next((int(l.split()[1]) * 1024 for l in read("/proc/meminfo").splitlines()
                if l.startswith("MemTotal:")), 0)
    return {
        "cpu_model": model,
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_bytes": mem,
        "avx512f": "avx512f" in flags,
        "kernel": platform.release(),
    }


def git():
    # The kernels are edited while figures are taken, so say which tracked files differ.
    modified = capture("git", "status", "--porcelain", "--untracked-files=no").splitlines()
    return {
        "commit": capture("git", "rev-parse", "HEAD").strip() or "unknown",
        "dirty": bool(modified),
        "modified_paths": [l[3:] for l in modified],
    }


def build(build_dir):
    cache = {}
    for line in read(pathlib.Path(build_dir) / "CMakeCache.txt").splitlines():
        m = re.match(r"^([A-Za-z_]+):[A-Z]+=(.*)$", line)
        if m:
            cache[m.group(1)] = m.group(2)
    return {
        "dir": str(build_dir),
        "build_type": cache.get("CMAKE_BUILD_TYPE") or "unknown",
        "cxx_compiler": cache.get("CMAKE_CXX_COMPILER", "unknown"),
        "cxx_flags": cache.get("CMAKE_CXX_FLAGS", ""),
    }


def conditions(work, params):
    commands = []
    for line in read(work / "commands.txt").splitlines():
        if line and line not in commands:  # Repeats of one command are listed once.
            commands.append(line)
    return {
        "date_utc": read(work / "date_utc").strip(),
        "finished_utc": read(work / "finished_utc").strip(),
        "machine": machine(),
        "git": git(),
        "build": build(params.get("build_dir", "build")),
        "load_average_before": read(work / "loadavg_before").strip(),
        "load_average_after": read(work / "loadavg_after").strip(),
        "commands": commands,
    }


# ----------------------------------------------------------------------------- summaries

def stats(values, scale=1.0, digits=4):
    values = [v * scale for v in values if v is not None]
    if not values:
        return {"n": 0}
    r = lambda x: round(x, digits)
    return {"n": len(values), "median": r(statistics.median(values)), "min": r(min(values)),
            "max": r(max(values)), "mean": r(statistics.fmean(values))}


def load_samples(work):
    return [json.loads(l) for l in read(work / "samples.jsonl").splitlines() if l.strip()]


def run_sample(s):
    """The timing fields of one `tessera run --json`; the ids and text are kept once."""
    o, t = s["output"], s["output"]["timings"]
    return {"threads": s["threads"], "rep": s["rep"], "prefill_seconds": t["prefill_seconds"],
            "decode_seconds": t["decode_seconds"], "decode_tokens_per_second": t["decode_tokens_per_second"],
            "generated_tokens": len(o["generated_ids"]), "finish_reason": o["finish_reason"],
            "device": o.get("device")}


def same_ids(samples, key, model):
    """The generated ids once, whether every sample agrees, and whether they agree with the
    llama2.c reference continuation shipped with stories260K (over the reference's length)."""
    ids = [s[key]["generated_ids"] for s in samples]
    out = {"generated_ids": ids[0] if ids else [], "all_samples_same_ids": all(i == ids[0] for i in ids)}
    ref = read(pathlib.Path(model) / "expected_once_upon_a_time.json")
    if ref and ids:
        expected = json.loads(ref)["generated_ids"]
        out["matches_reference_prefix"] = ids[0][:len(expected)] == expected[:len(ids[0])]
    return out


def figure_run(work, params):
    raw = load_samples(work)
    samples = [run_sample(s) for s in raw]
    by_threads = {}
    for s in samples:
        by_threads.setdefault(s["threads"], []).append(s["decode_tokens_per_second"])
    per = {str(t): {"decode_tokens_per_second": stats(v, digits=1)} for t, v in sorted(by_threads.items())}
    return {
        "figure": "`tessera run` decode, stories260K",
        "readme_conditions": "batch 1, greedy, 200 tokens",
        "definitions": {
            "decode_tokens_per_second": "decode steps / decode seconds as `tessera run --json` reports it: "
                                        "the 199 single-token forward passes (plus sampling) after the "
                                        "first token; prefill and model load excluded",
        },
        "samples": samples,
        "output": same_ids(raw, "output", params.get("model", "")),
        "summary": {
            "by_threads": per,
            "figure": ", ".join(f"{t} thread{'s' if t != '1' else ''}: "
                                f"{v['decode_tokens_per_second']['median']:,.0f} tok/s median "
                                f"({v['decode_tokens_per_second']['min']:,.0f}–"
                                f"{v['decode_tokens_per_second']['max']:,.0f})" for t, v in per.items()),
        },
    }


def delta(before, after, key):
    if before.get(key) is None or after.get(key) is None:
        return None
    return after[key] - before[key]


def figure_coordinator(work, params):
    raw = load_samples(work)
    # Reference: `tessera run` with the threads each worker of the tp group gets.
    run_per_token = {}
    run_samples = []
    for s in raw:
        if s["kind"] == "run":
            r = run_sample(s)
            r["tp"] = s["tp"]
            run_samples.append(r)
            run_per_token.setdefault(s["tp"], []).append(1.0 / r["decode_tokens_per_second"])
    run_median = {tp: statistics.median(v) for tp, v in run_per_token.items()}

    requests = []
    probe = {}  # tp -> rank 0 forward seconds of the latest 1-token request (its prefill).
    for s in raw:
        if s["kind"] == "run":
            continue
        g, b, a = s["generate"], s["rank0_before"], s["rank0_after"]
        fwd_s, fwd_n = delta(b, a, "forward_seconds_sum"), delta(b, a, "forward_seconds_count")
        r = {"kind": s["kind"], "tp": s["tp"], "threads": s["threads"], "rep": s["rep"],
             "completion_tokens": g["usage"]["completion_tokens"], "finish_reason": g["finish_reason"],
             "queue_seconds": g["timings"]["queue_seconds"],
             "ttft_seconds": g["timings"]["time_to_first_token_seconds"],
             "e2e_seconds": g["timings"]["total_seconds"],
             "rank0_forward_seconds": fwd_s, "rank0_forward_steps": fwd_n,
             "rank0_decode_step_seconds": delta(b, a, "decode_step_seconds_sum"),
             "rank0_decode_steps": delta(b, a, "decode_step_seconds_count"),
             "rank0_metrics_port": a.get("metrics_port")}
        if s["kind"] == "prefill_probe":
            probe[s["tp"]] = fwd_s
        elif s["kind"] == "decode":
            n = r["completion_tokens"]
            per_token = (r["e2e_seconds"] - r["ttft_seconds"]) / (n - 1)
            r["step_seconds"] = per_token
            r["prefill_forward_seconds_from_probe"] = probe.get(s["tp"])
            if fwd_s is not None and fwd_n and fwd_n > 1 and probe.get(s["tp"]) is not None:
                r["rank0_decode_forward_seconds"] = (fwd_s - probe[s["tp"]]) / (fwd_n - 1)
                r["overhead_seconds_vs_rank0_forward"] = per_token - r["rank0_decode_forward_seconds"]
            r["run_decode_seconds_per_token"] = run_median.get(s["tp"])
            if s["tp"] in run_median:
                r["overhead_seconds_vs_run"] = per_token - run_median[s["tp"]]
        requests.append(r)

    per_tp = {}
    for tp in sorted({r["tp"] for r in requests}):
        d = [r for r in requests if r["tp"] == tp and r["kind"] == "decode"]
        per_tp[str(tp)] = {
            "threads_per_worker": d[0]["threads"] if d else None,
            "overhead_ms_vs_rank0_forward": stats([r.get("overhead_seconds_vs_rank0_forward") for r in d], 1e3),
            "overhead_ms_vs_run": stats([r.get("overhead_seconds_vs_run") for r in d], 1e3),
            "step_ms": stats([r["step_seconds"] for r in d], 1e3),
            "rank0_decode_forward_ms": stats([r.get("rank0_decode_forward_seconds") for r in d], 1e3),
            "run_decode_ms_per_token": stats(run_per_token.get(tp, []), 1e3),
        }
    figure = ", ".join(f"tp {tp}: {v['overhead_ms_vs_rank0_forward'].get('median', float('nan')):.2f} ms"
                       for tp, v in per_tp.items())
    return {
        "figure": "coordinator step overhead",
        "readme_conditions": "stories260K, 200-token greedy, (e2e − ttft)/199 minus rank 0 forward",
        "definitions": {
            "step_seconds": "(e2e − ttft) / (completion_tokens − 1) of one 200-token greedy ignore-eos "
                            "request, alone on the server, timings from the coordinator's response "
                            "(arrival to first token, arrival to last token): the wall time of one "
                            "decode step as the coordinator runs it",
            "rank0_decode_forward_seconds": "rank 0's forward time per decode step of the same request: "
                                            "(Δ tessera_worker_forward_seconds_sum − forward time of a "
                                            "1-token request with the same prompt, sent just before) / "
                                            "(Δ tessera_worker_forward_seconds_count − 1), read from rank "
                                            "0's /metrics before and after; collectives included",
            "overhead_seconds_vs_rank0_forward": "step_seconds − rank0_decode_forward_seconds: scheduling, "
                                                 "step RPC fan-out and gathering, sampling and response "
                                                 "handling; the summary figure",
            "overhead_seconds_vs_run": "step_seconds − the median decode seconds per token of `tessera run` "
                                       "(same model, prompt, threads per worker). Equal in meaning at tp 1; "
                                       "at tp > 1 `tessera run` runs the unsharded model without "
                                       "collectives, so this is a cross-check, not the figure",
            "prefill_probe": "the 1-token request whose forward time is subtracted above",
            "warmup": "a 200-token request sent first after the server is ready; not summarised",
        },
        "run_samples": run_samples,
        "requests": requests,
        "summary": {"by_tp": per_tp, "figure": figure + " (median overhead vs rank 0 forward)"},
    }


def benchmark_samples(work):
    """Iterations of a Google Benchmark JSON file (repetitions, not aggregates) and its context."""
    text = read(work / "benchmark.json")
    data = json.loads(text) if text.strip() else {"benchmarks": []}
    runs = [b for b in data["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
    # Google Benchmark exits 0 when its filter matches nothing, so say so here.
    if not runs:
        sys.exit(f"readme_figures.py: no benchmark ran in {work.name}: the filter matched nothing "
                 "(see the command in commands.txt and the binary's --benchmark_list_tests)")
    return data.get("context", {}), runs


def to_seconds(value, unit):
    return value * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]


def figure_scheduler(work, params):
    context, runs = benchmark_samples(work)
    by_name = {}
    for b in runs:
        if b.get("error_occurred"):
            continue
        by_name.setdefault(b["run_name"], []).append(to_seconds(b["real_time"], b["time_unit"]))
    per = {name: {"step_us": stats(v, 1e6, 2)} for name, v in by_name.items()}
    headline = next((n for n in per if "seqs:1024/prefix_cache:1" in n), None)
    return {
        "figure": "scheduler step (schedule + update)",
        "readme_conditions": "1,024 running decode sequences, `scheduler_bench`",
        "definitions": {
            "step_us": "real time of one Schedule() + Update() iteration of BM_DecodeStep, every "
                       "sequence decoding one token (no prefill in the timed loop); one sample per "
                       "Google Benchmark repetition, each the mean of its iterations",
            "prefix_cache": "1: prefix caching enabled in the scheduler config, 0: disabled",
        },
        "google_benchmark_context": context,
        "samples": runs,
        "summary": {
            "by_benchmark": per,
            "figure": (f"{per[headline]['step_us']['median']:.0f} µs median with 1,024 sequences, prefix "
                       f"caching on" if headline else "no 1,024-sequence result")
                      + "".join(f"; {n.split('/', 1)[1].replace('/iterations:2000', '')}: "
                                f"{v['step_us']['median']:.0f} µs"
                                for n, v in per.items() if n != headline),
        },
    }


def figure_kernel(work, params):
    context, runs = benchmark_samples(work)
    by_name = {}
    for b in runs:
        if not b.get("error_occurred"):
            by_name.setdefault(b["run_name"], []).append(b)
    per = {}
    for name, bs in by_name.items():
        per[name] = {
            "gflops": stats([b.get("flops") for b in bs], 1e-9, 1),
            "ms_per_call": stats([to_seconds(b["real_time"], b["time_unit"]) for b in bs], 1e3, 3),
            "weight_gb_per_s": stats([b.get("bytes_per_second") for b in bs], 1.073741824e-9, 2),
            "threads": bs[0].get("threads"),
            "simd": bs[0].get("label"),
        }
    return {
        "figure": "BF16 GEMV bandwidth and GEMM GFLOP/s at the 1B model's shapes, and the VDPBF16PS peak",
        "readme_conditions": "`kernel_bench`, m = 1 and 128 rows of activations against BF16 weights, "
                              "float (level 2, AVX-512) and BF16-activation (level 3, AVX512-BF16) paths",
        "definitions": {
            "gflops": "2·m·N·K / seconds per call (the `flops` counter of BM_Gemm), one sample per "
                      "repetition",
            "weight_gb_per_s": "the `bytes_per_second` counter (weights + activations + output bytes, "
                               "reported as binary GiB/s by Google Benchmark, converted to GB/s here)",
            "benchmark_name": "BM_Gemm/m:<rows>/N:<out features>/K:<in features>/dtype:2 (2 = BF16)"
                              "[/level:<forced SIMD level>]; the filter in parameters picks them. "
                              "BM_Bf16DotPeak: 16 independent VDPBF16PS chains per thread, no loads "
                              "(the compute ceiling of the BF16 path)",
            "weights": "the benchmark rotates through copies of the weights (512 MiB in all) so they come "
                       "from memory, as in a forward pass",
        },
        "google_benchmark_context": context,
        "samples": runs,
        "skipped": [{"name": b["name"], "error": b.get("error_message")} for b in runs if b.get("error_occurred")],
        "summary": {
            "by_benchmark": per,
            "figure": "; ".join(f"{n.split('/', 1)[1].replace('/real_time', '')}: "
                                f"{v['gflops'].get('median', float('nan')):.0f} GFLOP/s median "
                                f"({v['threads']:.0f} threads, {v['simd']})" for n, v in per.items()),
        },
    }


def figure_rss(work, params):
    raw = load_samples(work)
    last = raw[-1]["workers"] if raw else []
    gb = lambda b: round(b / 1e9, 3) if b is not None else None
    per_worker = [{"rank": w.get("rank"), "pid": w["pid"], "VmRSS_gb": gb(w.get("VmRSS_bytes")),
                   "VmHWM_gb": gb(w.get("VmHWM_bytes")), "RssAnon_gb": gb(w.get("RssAnon_bytes")),
                   "RssFile_gb": gb(w.get("RssFile_bytes")), "weight_gb": gb(w.get("weight_bytes")),
                   "kv_cache_gb": gb(w.get("kv_cache_bytes"))} for w in last]
    rss = [w["VmRSS_gb"] for w in per_worker if w["VmRSS_gb"] is not None]
    return {
        "figure": "worker memory, tp 2",
        "readme_conditions": "llama-1b BF16 (2.49 GB), 32 MB KV per worker, VmRSS per worker after loading",
        "definitions": {
            "VmRSS": "resident set of each tessera-worker process (/proc/<pid>/status), read after the "
                     "coordinator's /readyz turned 200 (every rank loaded its shard and ran the warm-up "
                     "step), several times a few seconds apart; the summary uses the last reading",
            "RssFile": "resident pages backed by files (weights mapped from model.safetensors, "
                       "if the loader maps them)",
            "weight_gb / kv_cache_gb": "the worker's own tessera_worker_weight_bytes and "
                                       "tessera_worker_kv_cache_bytes gauges",
        },
        "samples": raw,
        "summary": {
            "per_worker": per_worker,
            "figure": (f"{statistics.fmean(rss):.2f} GB VmRSS per worker (mean of {len(rss)}; "
                       f"{min(rss):.2f}–{max(rss):.2f})") if rss else "no worker found",
        },
    }


FIGURES = {"run": figure_run, "coordinator": figure_coordinator, "scheduler": figure_scheduler,
           "kernel": figure_kernel, "rss": figure_rss}


def parse_value(v):
    if v in ("true", "false"):
        return v == "true"
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def write(figure, work, out, pairs):
    work = pathlib.Path(work)
    params = {}
    for p in pairs:
        k, _, v = p.partition("=")
        params[k] = parse_value(v)
    result = FIGURES[figure](work, params)
    doc = {"figure": result.pop("figure"), "readme_conditions": result.pop("readme_conditions"),
           "conditions": conditions(work, params), "parameters": params}
    doc.update(result)
    pathlib.Path(out).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    print(f"{out}: {doc['summary']['figure']}", file=sys.stderr)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, args = argv[1], argv[2:]
    if cmd == "ports":
        print(free_ports(int(args[0])))
    elif cmd == "ready":
        try:
            return 0 if http_get(int(args[0]), "/readyz", timeout=2)[0] == 200 else 1
        except OSError:
            return 1
    elif cmd == "rank0-forward":
        print(json.dumps(rank0_forward([int(p) for p in args])))
    elif cmd == "worker-memory":
        print(json.dumps(worker_memory(int(args[0]))))
    elif cmd == "write":
        write(args[0], args[1], args[2], args[3:])
    else:
        print(f"readme_figures.py: unknown command {cmd!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
