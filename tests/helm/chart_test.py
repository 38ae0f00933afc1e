#!/usr/bin/env python3
"""Checks of the Helm chart (helm/tessera) without a cluster.

The chart is rendered and linted by Helm's own Go library (helm-python-sdk, no helm
binary), every rendered object is validated against the Kubernetes API schemas
(kubernetes-validate, offline) and yamllint, and the tests assert what an operator relies
on: pod counts, GPU requests, probe ports, NetworkPolicy selectors, drain settings, and
that values.schema.json rejects impossible values. The tools come from
requirements-dev.txt (scripts/setup.sh).
"""
import copy
import os
import sys
import unittest

try:
    import helm_python
    import kubernetes_validate
    import yaml
    from yamllint import config as yamllint_config
    from yamllint import linter as yamllint_linter
except ImportError as e:  # Fail loudly: a skip would hide a broken setup.
    sys.exit(f"chart_test: missing Python package ({e}); run scripts/setup.sh "
             "(python3 -m pip install -r requirements-dev.txt)")

SOURCE_DIR = os.environ.get("TESSERA_SOURCE_DIR",
                            os.path.join(os.path.dirname(__file__), "..", ".."))
CHART_DIR = os.path.join(SOURCE_DIR, "helm", "tessera")
# The newest Kubernetes release whose schemas kubernetes-validate ships.
KUBE_VERSION = kubernetes_validate.utils.latest_version()
# Custom resources: not in the Kubernetes API schemas, so checked structurally below.
CRD_GROUPS = ("monitoring.coreos.com/", "leaderworkerset.x-k8s.io/", "cert-manager.io/")
RELEASE, NAMESPACE = "demo", "serving"

VALUE_SETS = {
    "defaults": {},
    "gpu_tp8_x2": {
        "tp": 8, "replicas": 2,
        "model": {"path": "/models/llama-3-70b", "source": "hostPath"},
        "worker": {"gpusPerWorker": 1, "shmSize": "16Gi",
                   "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                   "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                   "topologySpreadConstraints": [{
                       "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                       "whenUnsatisfiable": "ScheduleAnyway",
                       "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "worker"}}}]},
    },
    "multinode_lws": {
        "tp": 16, "replicas": 2,
        "worker": {"gpusPerWorker": 1},
        "leaderWorkerSet": {"enabled": True, "subGroupSize": 8,
                            "exclusiveTopology": "topology.kubernetes.io/zone"},
    },
    "monitoring": {
        "monitoring": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
                       "prometheusRule": {"enabled": True}},
        "networkPolicy": {"apiFrom": [{"namespaceSelector": {"matchLabels": {"team": "apps"}}}],
                          "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]},
    },
    "speculative_draft": {
        "coordinator": {"speculative": {"method": "draft", "numTokens": 3,
                                        "draftModelPath": "/models/llama-3.2-1b"}},
    },
    "auth": {
        "auth": {"apiKeysSecret": "tessera-api-keys", "joinSecret": "tessera-join"},
        "tests": {"apiKeySecret": "tessera-test-key"},
    },
    "object_store": {
        "model": {"source": "objectStore", "path": "/models/llama",
                  "objectStore": {"url": ":s3:models/llama",
                                  "envFrom": [{"secretRef": {"name": "s3-credentials"}}]}},
        "imagePullSecrets": [{"name": "registry"}],
    },
    "tls_secret": {"tls": {"secretName": "tessera-tls"}},
    "cluster_plaintext": {"cluster": {"tls": {"enabled": False}}},
    "cluster_tls_cert_manager": {
        "cluster": {"tls": {"serverName": "tessera.cluster.internal",
                            "certManager": {"enabled": True, "issuerRef": {"name": "tessera-cluster-ca"}}}},
    },
    "tls_cert_manager_mtls": {
        "tls": {"clientCA": True,
                "certManager": {"enabled": True, "issuerRef": {"name": "internal-ca", "kind": "ClusterIssuer"},
                                "dnsNames": ["llm.example.com"]}},
    },
}


def merged(overrides):
    """Chart defaults with overrides applied (what an install would use)."""
    with helm_python.Chart.load(CHART_DIR) as chart:
        return chart.merge_values(overrides)


def render(values):
    """Rendered manifests as {template path: text}, NOTES.txt left out."""
    with helm_python.Chart.load(CHART_DIR) as chart:
        out = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return {k: v for k, v in out.items() if not k.endswith("NOTES.txt")}


def objects(values):
    """Every rendered Kubernetes object."""
    objs = []
    for text in render(values).values():
        objs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objs


def by_kind(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def pod_templates(objs):
    """(owner kind, pod template) of every workload, the helm test pod included."""
    out = []
    for o in objs:
        if o["kind"] in ("Deployment", "StatefulSet"):
            out.append((o["kind"], o["spec"]["template"]))
        elif o["kind"] == "LeaderWorkerSet":
            out.append((o["kind"], o["spec"]["leaderWorkerTemplate"]["workerTemplate"]))
        elif o["kind"] == "Pod":
            out.append((o["kind"], o))
    return out


def component_template(objs, component):
    for _, t in pod_templates(objs):
        if t["metadata"]["labels"].get("app.kubernetes.io/component") == component:
            return t
    raise AssertionError(f"no pod template of component {component}")


def selects(selector, labels):
    """Whether a matchLabels selector selects these labels."""
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def named_port(container, name):
    for p in container.get("ports", []):
        if p["name"] == name:
            return p["containerPort"]
    raise AssertionError(f"container {container['name']} has no port named {name}")


def probe_port(container, probe):
    """The numeric port a probe hits (named ports resolved)."""
    spec = container[probe]
    action = spec.get("httpGet") or spec.get("grpc") or spec.get("tcpSocket")
    port = action["port"]
    return named_port(container, port) if isinstance(port, str) else port


class ChartLintTest(unittest.TestCase):
    def test_lint_is_clean_for_every_value_set(self):
        for name, values in VALUE_SETS.items():
            with self.subTest(values=name):
                report = helm_python.lint(CHART_DIR, values, strict=True, namespace=NAMESPACE,
                                          kube_version=f"v{KUBE_VERSION}")
                problems = [m for m in report["messages"] if m["severity"] >= 2]
                self.assertEqual(report["errors"], [])
                self.assertEqual(problems, [], report)

    def test_rendered_yaml_passes_yamllint(self):
        conf = yamllint_config.YamlLintConfig(
            "extends: default\nrules:\n  line-length: {max: 200}\n  document-start: disable\n"
            "  comments: {min-spaces-from-content: 1}\n"
            # toYaml writes block sequences unindented under their key, kubectl-style.
            "  indentation: {spaces: 2, indent-sequences: whatever}\n")
        for name, values in VALUE_SETS.items():
            for template, text in render(values).items():
                if not text.strip():
                    continue
                with self.subTest(values=name, template=template):
                    problems = [f"{p.line}:{p.column} {p.desc} ({p.rule})"
                                for p in yamllint_linter.run(text, conf)]
                    self.assertEqual(problems, [], text)

    def test_objects_validate_against_kubernetes_schemas(self):
        for name, values in VALUE_SETS.items():
            for obj in objects(values):
                if obj["apiVersion"].startswith(CRD_GROUPS):
                    continue  # Custom resources: see the structural tests below.
                with self.subTest(values=name, kind=obj["kind"], name=obj["metadata"]["name"]):
                    try:
                        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
                    except kubernetes_validate.ValidationError as e:
                        self.fail(f"{obj['kind']}/{obj['metadata']['name']}: {e.message} at {list(e.path)}")


class ChartShapeTest(unittest.TestCase):
    def test_worker_pods_are_tp_times_replicas(self):
        for name, values in VALUE_SETS.items():
            with self.subTest(values=name):
                v = merged(values)
                objs = objects(values)
                sts = by_kind(objs, "StatefulSet")
                lws = by_kind(objs, "LeaderWorkerSet")
                self.assertEqual(len(sts) + len(lws), 1, "exactly one worker workload")
                if sts:
                    pods = sts[0]["spec"]["replicas"]
                else:
                    spec = lws[0]["spec"]
                    pods = spec["replicas"] * spec["leaderWorkerTemplate"]["size"]
                    self.assertEqual(spec["leaderWorkerTemplate"]["size"], v["tp"])
                self.assertEqual(pods, v["tp"] * v["replicas"])
                coordinator = component_template(objs, "coordinator")["spec"]["containers"][0]
                self.assertIn(f"--tp={v['tp']}", coordinator["args"])
                self.assertIn(f"--replicas={v['replicas']}", coordinator["args"])

    def test_gpu_requests_follow_values(self):
        objs = objects(VALUE_SETS["gpu_tp8_x2"])
        worker = component_template(objs, "worker")["spec"]["containers"][0]
        self.assertEqual(worker["resources"]["limits"]["nvidia.com/gpu"], 1)
        self.assertEqual(worker["resources"]["requests"]["nvidia.com/gpu"], 1)
        self.assertIn("--device=cuda", worker["args"][0])
        self.assertTrue(worker["image"].endswith("-cuda"), worker["image"])
        # The coordinator never touches a GPU.
        coordinator = component_template(objs, "coordinator")["spec"]["containers"][0]
        self.assertNotIn("nvidia.com/gpu", str(coordinator["resources"]))
        self.assertTrue(coordinator["image"].endswith("-cpu"), coordinator["image"])

        other = objects({"worker": {"gpusPerWorker": 2, "gpuResource": "amd.com/gpu"}})
        worker = component_template(other, "worker")["spec"]["containers"][0]
        self.assertEqual(worker["resources"]["limits"]["amd.com/gpu"], 2)

    def test_cpu_mode_requests_no_accelerator(self):
        objs = objects({})
        worker = component_template(objs, "worker")["spec"]["containers"][0]
        self.assertNotIn("gpu", str(worker["resources"]))
        self.assertIn("--device=cpu", worker["args"][0])
        self.assertTrue(worker["image"].endswith("-cpu"), worker["image"])

    def test_probes_hit_the_health_endpoints_on_the_right_ports(self):
        for name, values in VALUE_SETS.items():
            with self.subTest(values=name):
                v = merged(values)
                objs = objects(values)
                c = component_template(objs, "coordinator")["spec"]["containers"][0]
                self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
                self.assertEqual(probe_port(c, "readinessProbe"), v["coordinator"]["metricsPort"])
                self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")
                self.assertEqual(probe_port(c, "livenessProbe"), v["coordinator"]["metricsPort"])
                self.assertEqual(probe_port(c, "startupProbe"), v["coordinator"]["metricsPort"])
                self.assertIn(f"--metrics-port={v['coordinator']['metricsPort']}", c["args"])
                self.assertIn(f"--port={v['coordinator']['port']}", c["args"])

                w = component_template(objs, "worker")["spec"]["containers"][0]
                # HTTP on the metrics port: the worker port wants a cluster client
                # certificate, which the kubelet's gRPC probe cannot present.
                self.assertEqual(w["readinessProbe"]["httpGet"]["path"], "/readyz")
                self.assertEqual(probe_port(w, "readinessProbe"), v["worker"]["metricsPort"])
                self.assertEqual(w["startupProbe"]["httpGet"]["path"], "/healthz")
                self.assertEqual(probe_port(w, "startupProbe"), v["worker"]["metricsPort"])
                self.assertEqual(w["livenessProbe"]["httpGet"]["path"], "/healthz")
                self.assertEqual(probe_port(w, "livenessProbe"), v["worker"]["metricsPort"])
                self.assertIn(f"--listen=0.0.0.0:{v['worker']['port']}", w["args"][0])
                self.assertIn(f"--metrics-port={v['worker']['metricsPort']}", w["args"][0])

    def test_services_route_to_the_pods(self):
        objs = objects({})
        coordinator = component_template(objs, "coordinator")
        worker = component_template(objs, "worker")
        services = {s["metadata"]["name"]: s for s in by_kind(objs, "Service")}
        api = services[f"{RELEASE}-tessera-coordinator"]
        cluster = services[f"{RELEASE}-tessera-cluster"]
        workers = services[f"{RELEASE}-tessera-worker"]
        for svc, pod in ((api, coordinator), (cluster, coordinator), (workers, worker)):
            self.assertTrue(selects({"matchLabels": svc["spec"]["selector"]}, pod["metadata"]["labels"]))
            container = pod["spec"]["containers"][0]
            for port in svc["spec"]["ports"]:
                named_port(container, port["targetPort"])
        self.assertEqual(workers["spec"]["clusterIP"], "None")
        # Workers register before the coordinator is ready.
        self.assertTrue(cluster["spec"]["publishNotReadyAddresses"])
        self.assertIn(f"--coordinator={RELEASE}-tessera-cluster.{NAMESPACE}.svc:50052", worker["spec"]["containers"][0]["args"][0])
        sts = by_kind(objs, "StatefulSet")[0]
        self.assertEqual(sts["spec"]["serviceName"], workers["metadata"]["name"])

    def test_openai_http_port_is_exposed_and_can_be_turned_off(self):
        objs = objects({})
        c = component_template(objs, "coordinator")["spec"]["containers"][0]
        self.assertIn("--http-port=8000", c["args"])
        self.assertEqual(named_port(c, "http"), 8000)
        api = {s["metadata"]["name"]: s for s in by_kind(objs, "Service")}[f"{RELEASE}-tessera-coordinator"]
        http = [p for p in api["spec"]["ports"] if p["name"] == "http"]
        self.assertEqual(len(http), 1)
        self.assertEqual((http[0]["port"], http[0]["targetPort"]), (8000, "http"))
        named = objects({"coordinator": {"httpPort": 8080, "servedModelName": "llama"}})
        c = component_template(named, "coordinator")["spec"]["containers"][0]
        self.assertIn("--http-port=8080", c["args"])
        self.assertIn("--served-model-name=llama", c["args"])
        off = objects({"coordinator": {"httpPort": 0}})
        c = component_template(off, "coordinator")["spec"]["containers"][0]
        self.assertIn("--http-port=0", c["args"])
        self.assertFalse(any(p["name"] == "http" for p in c["ports"]))
        api = {s["metadata"]["name"]: s for s in by_kind(off, "Service")}[f"{RELEASE}-tessera-coordinator"]
        self.assertFalse(any(p["name"] == "http" for p in api["spec"]["ports"]))

    def test_network_policies_select_the_pods_and_admit_only_peers(self):
        for name in ("defaults", "multinode_lws", "monitoring"):
            with self.subTest(values=name):
                v = merged(VALUE_SETS[name])
                objs = objects(VALUE_SETS[name])
                coordinator = component_template(objs, "coordinator")["metadata"]["labels"]
                worker = component_template(objs, "worker")["metadata"]["labels"]
                policies = by_kind(objs, "NetworkPolicy")
                self.assertEqual(len(policies), 2)
                for_workers = [p for p in policies if selects(p["spec"]["podSelector"], worker)]
                for_coordinator = [p for p in policies if selects(p["spec"]["podSelector"], coordinator)]
                self.assertEqual(len(for_workers), 1)
                self.assertEqual(len(for_coordinator), 1)
                self.assertFalse(selects(for_workers[0]["spec"]["podSelector"], coordinator))

                # Workers: every rule either names its sources (the coordinator and worker
                # pods) or opens only the metrics port.
                peers = []
                for rule in for_workers[0]["spec"]["ingress"]:
                    if "ports" in rule:
                        self.assertEqual([p["port"] for p in rule["ports"]], [v["worker"]["metricsPort"]])
                        continue
                    self.assertIn("from", rule)
                    for src in rule["from"]:
                        self.assertEqual(set(src), {"podSelector"}, "peers are pods of this release only")
                        peers.append(src["podSelector"])
                self.assertTrue(any(selects(p, coordinator) for p in peers))
                self.assertTrue(any(selects(p, worker) for p in peers))
                self.assertTrue(all(selects(p, coordinator) or selects(p, worker) for p in peers))

                # Coordinator: workers reach it on the registration and rendezvous store
                # ports only; everyone else only on the API and metrics ports. No rule
                # opens every port.
                open_ports, worker_ports = set(), set()
                for rule in for_coordinator[0]["spec"]["ingress"]:
                    self.assertIn("ports", rule, "a rule without ports opens every port")
                    ports = {p["port"] for p in rule["ports"]}
                    sources = rule.get("from", [])
                    if sources and all("podSelector" in src and selects(src["podSelector"], worker)
                                       for src in sources):
                        worker_ports.update(ports)
                    else:
                        open_ports.update(ports)
                api_ports = {v["coordinator"]["port"], v["coordinator"]["metricsPort"]}
                if v["coordinator"].get("httpPort"):
                    api_ports.add(v["coordinator"]["httpPort"])
                self.assertEqual(open_ports, api_ports)
                self.assertEqual(worker_ports, {v["coordinator"]["clusterPort"], v["coordinator"]["storePort"]})
                # The coordinator is told the port the policy opens.
                args = component_template(objs, "coordinator")["spec"]["containers"][0]["args"]
                self.assertIn(f"--store-port={v['coordinator']['storePort']}", args)

    def test_pods_are_locked_down(self):
        for name, values in VALUE_SETS.items():
            for kind, t in pod_templates(objects(values)):
                with self.subTest(values=name, pod=t["metadata"].get("name", kind)):
                    spec = t["spec"]
                    self.assertTrue(spec["securityContext"]["runAsNonRoot"])
                    self.assertFalse(spec["automountServiceAccountToken"])
                    for c in spec["containers"] + spec.get("initContainers", []):
                        sc = c["securityContext"]
                        self.assertTrue(sc["readOnlyRootFilesystem"], c["name"])
                        self.assertFalse(sc["allowPrivilegeEscalation"], c["name"])
                        self.assertEqual(sc["capabilities"]["drop"], ["ALL"], c["name"])
                    if kind != "Pod":
                        mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
                        self.assertIn("/tmp", mounts, "a writable /tmp on a read-only root")
                        # A .gguf model.path writes its translated documents there, not under $HOME.
                        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
                        self.assertTrue(env.get("TESSERA_CACHE_DIR", "").startswith("/tmp/"), env)

    def test_workers_get_a_memory_backed_dev_shm(self):
        objs = objects(VALUE_SETS["gpu_tp8_x2"])
        spec = component_template(objs, "worker")["spec"]
        volumes = {v["name"]: v for v in spec["volumes"]}
        mount = [m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        self.assertEqual(len(mount), 1)
        shm = volumes[mount[0]["name"]]
        self.assertEqual(shm["emptyDir"]["medium"], "Memory")
        self.assertEqual(shm["emptyDir"]["sizeLimit"], "16Gi")

    def test_placement_values_reach_the_worker_pods(self):
        values = VALUE_SETS["gpu_tp8_x2"]
        spec = component_template(objects(values), "worker")["spec"]
        self.assertEqual(spec["nodeSelector"], values["worker"]["nodeSelector"])
        self.assertEqual(spec["tolerations"], values["worker"]["tolerations"])
        self.assertEqual(spec["topologySpreadConstraints"], values["worker"]["topologySpreadConstraints"])

    def test_coordinator_drains_before_it_is_killed(self):
        v = merged({})
        objs = objects({})
        spec = component_template(objs, "coordinator")["spec"]
        c = spec["containers"][0]
        drain = v["coordinator"]["drainTimeoutSeconds"]
        sleep = v["coordinator"]["preStopSleepSeconds"]
        self.assertIn(f"--drain-timeout-seconds={drain}", c["args"])
        self.assertEqual(c["lifecycle"]["preStop"]["exec"]["command"], ["/bin/sleep", str(sleep)])
        self.assertGreater(spec["terminationGracePeriodSeconds"], drain + sleep)
        # A grace period shorter than the drain is refused at render time.
        with self.assertRaises(helm_python.HelmRenderError) as e:
            render({"coordinator": {"drainTimeoutSeconds": 120, "terminationGracePeriodSeconds": 60}})
        self.assertIn("terminationGracePeriodSeconds", str(e.exception))

    def test_speculative_decoding_values_reach_the_coordinator(self):
        args = component_template(objects({}), "coordinator")["spec"]["containers"][0]["args"]
        self.assertFalse([a for a in args if a.startswith("--speculative")], "off by default")
        args = component_template(objects(VALUE_SETS["speculative_draft"]), "coordinator")["spec"]["containers"][0]["args"]
        for flag in ("--speculative=draft", "--num-speculative-tokens=3", "--draft-model=/models/llama-3.2-1b"):
            self.assertIn(flag, args)
        ngram = {"coordinator": {"speculative": {"method": "ngram", "promptLookupMin": 1}}}
        args = component_template(objects(ngram), "coordinator")["spec"]["containers"][0]["args"]
        self.assertIn("--speculative=ngram", args)
        self.assertIn("--prompt-lookup-min=1", args)
        self.assertFalse([a for a in args if a.startswith("--draft-model")])
        with self.assertRaises(helm_python.HelmRenderError) as e:
            render({"coordinator": {"speculative": {"method": "draft"}}})
        self.assertIn("draftModelPath", str(e.exception))

    def test_expert_parallel_value_reaches_the_coordinator(self):
        args = component_template(objects({}), "coordinator")["spec"]["containers"][0]["args"]
        self.assertNotIn("--expert-parallel", args, "off by default")
        on = {"tp": 8, "coordinator": {"expertParallel": True}}
        args = component_template(objects(on), "coordinator")["spec"]["containers"][0]["args"]
        self.assertIn("--expert-parallel", args)
        with self.assertRaises(helm_python.HelmValuesError):
            render({"coordinator": {"expertParallel": "yes"}})  # The schema wants a boolean.

    def test_enforce_eager_value_reaches_the_coordinator(self):
        args = component_template(objects({}), "coordinator")["spec"]["containers"][0]["args"]
        self.assertNotIn("--enforce-eager", args)
        on = {"coordinator": {"enforceEager": True}}
        args = component_template(objects(on), "coordinator")["spec"]["containers"][0]["args"]
        self.assertIn("--enforce-eager", args)
        with self.assertRaises(helm_python.HelmValuesError):
            render({"coordinator": {"enforceEager": "yes"}})  # The schema wants a boolean.

    def test_replica_roles_reach_the_coordinator(self):
        args = component_template(objects({}), "coordinator")["spec"]["containers"][0]["args"]
        self.assertFalse([a for a in args if a.startswith("--replica-roles")], "unset by default")
        on = {"replicas": 3, "replicaRoles": ["prefill", "decode", "decode"]}
        args = component_template(objects(on), "coordinator")["spec"]["containers"][0]["args"]
        self.assertIn("--replica-roles=prefill,decode,decode", args)
        with self.assertRaises(helm_python.HelmValuesError):
            render({"replicaRoles": ["encode"]})  # The schema knows the roles.
        with self.assertRaises(Exception):
            render({"replicas": 1, "replicaRoles": ["prefill", "decode"]})  # More roles than groups.

    def test_gpu_memory_utilization_value_reaches_the_coordinator(self):
        args = component_template(objects({}), "coordinator")["spec"]["containers"][0]["args"]
        self.assertFalse([a for a in args if a.startswith("--gpu-memory-utilization")], "unset by default")
        on = {"coordinator": {"gpuMemoryUtilization": 0.9}}
        args = component_template(objects(on), "coordinator")["spec"]["containers"][0]["args"]
        self.assertIn("--gpu-memory-utilization=0.9", args)
        self.assertIn("--kv-memory-fraction=0.5", args)  # Still passed; the coordinator prefers the share.

    def test_leader_worker_set_places_multi_node_groups(self):
        objs = objects(VALUE_SETS["multinode_lws"])
        lws = by_kind(objs, "LeaderWorkerSet")[0]
        self.assertEqual(lws["apiVersion"], "leaderworkerset.x-k8s.io/v1")
        spec = lws["spec"]
        self.assertEqual(spec["replicas"], 2)
        self.assertEqual(spec["leaderWorkerTemplate"]["size"], 16)
        self.assertEqual(spec["leaderWorkerTemplate"]["subGroupPolicy"]["subGroupSize"], 8)
        self.assertEqual(spec["leaderWorkerTemplate"]["restartPolicy"], "RecreateGroupOnPodRestart")
        annotations = lws["metadata"]["annotations"]
        self.assertEqual(annotations["leaderworkerset.sigs.k8s.io/exclusive-topology"], "topology.kubernetes.io/zone")
        self.assertEqual(annotations["leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"], "kubernetes.io/hostname")
        # The embedded pod template is a valid core/v1 PodTemplateSpec.
        template = {"apiVersion": "v1", "kind": "PodTemplate",
                    "metadata": {"name": "lws-worker"}, "template": spec["leaderWorkerTemplate"]["workerTemplate"]}
        kubernetes_validate.validate(template, KUBE_VERSION, strict=True)
        args = spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"][0]
        self.assertIn('--rank-hint="${LWS_WORKER_INDEX}"', args)
        self.assertIn('--replica-hint="${GROUP_INDEX}"', args)
        with self.assertRaises(helm_python.HelmRenderError):
            render({"tp": 12, "leaderWorkerSet": {"enabled": True, "subGroupSize": 8}})

    def test_monitoring_objects(self):
        objs = objects(VALUE_SETS["monitoring"])
        services = by_kind(objs, "Service")
        monitors = by_kind(objs, "ServiceMonitor")
        self.assertEqual(len(monitors), 2)
        for m in monitors:
            self.assertEqual(m["apiVersion"], "monitoring.coreos.com/v1")
            self.assertEqual(m["metadata"]["labels"]["release"], "prometheus")
            matched = [s for s in services if selects(m["spec"]["selector"], s["metadata"]["labels"])
                       and any(p["name"] == "metrics" for p in s["spec"]["ports"])]
            self.assertEqual(len(matched), 1, m["metadata"]["name"])
            self.assertEqual(m["spec"]["endpoints"][0]["port"], "metrics")
            # The job label of the targets is the one deploy/monitoring uses (the
            # dashboard's worker `up` panel and the alerts select on it), whatever the
            # release is called.
            job_label = m["spec"]["jobLabel"]
            component = m["metadata"]["labels"]["app.kubernetes.io/component"]
            self.assertEqual(matched[0]["metadata"]["labels"][job_label], f"tessera-{component}")
        rule = by_kind(objs, "PrometheusRule")[0]
        alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
        self.assertEqual(set(alerts), {"TesseraNoReadyGroup", "TesseraCoordinatorDown", "TesseraTimeToFirstTokenP99OverSLO",
                                       "TesseraKVCacheNearlyFull", "TesseraHighErrorRatio", "TesseraWorkerDown"})
        self.assertIn("absent(", alerts["TesseraNoReadyGroup"]["expr"])
        self.assertIn("absent(up{", alerts["TesseraCoordinatorDown"]["expr"])
        self.assertIn("> 0.95", alerts["TesseraKVCacheNearlyFull"]["expr"])
        self.assertEqual(alerts["TesseraKVCacheNearlyFull"]["for"], "10m")
        self.assertIn(f'service="{RELEASE}-tessera-coordinator"', alerts["TesseraHighErrorRatio"]["expr"])
        self.assertIn(f'service="{RELEASE}-tessera-worker"', alerts["TesseraWorkerDown"]["expr"])
        # Monitoring is opt-in: no custom resources a cluster without the operator would refuse.
        self.assertEqual([o for o in objects({}) if o["apiVersion"].startswith(CRD_GROUPS)], [])

    def test_model_storage_sources(self):
        pvc = component_template(objects({}), "worker")["spec"]["volumes"]
        self.assertEqual(pvc[0]["persistentVolumeClaim"]["claimName"], "tessera-models")
        host = component_template(objects(VALUE_SETS["gpu_tp8_x2"]), "worker")["spec"]["volumes"]
        self.assertEqual(host[0]["hostPath"]["type"], "Directory")
        objs = objects(VALUE_SETS["object_store"])
        for component in ("coordinator", "worker"):
            spec = component_template(objs, component)["spec"]
            self.assertEqual(spec["imagePullSecrets"], [{"name": "registry"}])
            init = spec["initContainers"][0]
            self.assertEqual(init["args"][:3], ["copy", ":s3:models/llama", "/models/llama"])
            self.assertIn("emptyDir", spec["volumes"][0])
        with self.assertRaises(helm_python.HelmRenderError):
            render({"model": {"source": "objectStore"}})

    def test_helm_test_pod_sends_one_generate(self):
        pods = by_kind(objects({}), "Pod")
        self.assertEqual(len(pods), 1)
        pod = pods[0]
        self.assertEqual(pod["metadata"]["annotations"]["helm.sh/hook"], "test")
        c = pod["spec"]["containers"][0]
        self.assertEqual(c["command"], ["tessera"])
        self.assertEqual(c["args"][0], "generate")
        self.assertIn(f"--server={RELEASE}-tessera-coordinator.{NAMESPACE}.svc:50051", c["args"])
        self.assertIn("--max-tokens=4", c["args"])
        self.assertEqual(pod["spec"]["restartPolicy"], "Never")

    def test_auth_secrets_are_mounted_and_passed(self):
        objs = objects(VALUE_SETS["auth"])
        coordinator = component_template(objs, "coordinator")
        c = coordinator["spec"]["containers"][0]
        self.assertIn("--api-keys-file=/etc/tessera/api-keys/api-keys", c["args"])
        self.assertIn("--join-secret-file=/etc/tessera/join-secret/join-secret", c["args"])
        volumes = {v["name"]: v for v in coordinator["spec"]["volumes"]}
        self.assertEqual(volumes["api-keys"]["secret"]["secretName"], "tessera-api-keys")
        self.assertEqual(volumes["join-secret"]["secret"]["secretName"], "tessera-join")
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        # A directory mount (no subPath): Kubernetes updates it in place, so keys rotate.
        self.assertNotIn("subPath", mounts["api-keys"])
        self.assertEqual(mounts["api-keys"]["mountPath"], "/etc/tessera/api-keys")
        worker_pod = component_template(objs, "worker")
        w = worker_pod["spec"]["containers"][0]
        self.assertIn("--join-secret-file=/etc/tessera/join-secret/join-secret", w["args"][0])
        self.assertIn("join-secret", {m["name"] for m in w["volumeMounts"]})
        self.assertEqual({v["name"]: v for v in worker_pod["spec"]["volumes"]}["join-secret"]["secret"]["secretName"],
                         "tessera-join")
        self.assertNotIn("api-keys", {v["name"] for v in worker_pod["spec"]["volumes"]})
        test_pod = by_kind(objs, "Pod")[0]["spec"]["containers"][0]
        self.assertEqual(test_pod["env"][0]["name"], "TESSERA_API_KEY")
        self.assertEqual(test_pod["env"][0]["valueFrom"]["secretKeyRef"]["name"], "tessera-test-key")
        # Off by default: no flags, no volumes.
        default = component_template(objects({}), "coordinator")["spec"]["containers"][0]
        self.assertFalse([a for a in default["args"] if "api-keys" in a or "join-secret" in a])


class ChartClusterTlsTest(unittest.TestCase):
    """Mutual TLS between coordinator and workers (cluster.tls), on by default."""
    MOUNT = "/etc/tessera/cluster-tls"

    def pods(self, values):
        objs = objects(values)
        return objs, component_template(objs, "coordinator")["spec"], component_template(objs, "worker")["spec"]

    def test_on_by_default_with_the_secret_mounted_in_every_pod(self):
        objs, coordinator, worker = self.pods({})
        c_args = coordinator["containers"][0]["args"]
        w_args = worker["containers"][0]["args"][0]
        for flag in (f"--cluster-ca={self.MOUNT}/ca.crt", f"--cluster-cert={self.MOUNT}/tls.crt",
                     f"--cluster-key={self.MOUNT}/tls.key", f"--cluster-server-name={RELEASE}-tessera-cluster"):
            self.assertIn(flag, c_args)
            self.assertIn(flag, w_args)
        self.assertNotIn("--insecure", c_args)
        self.assertNotIn("--insecure", w_args)
        for pod in (coordinator, worker):
            volume = {v["name"]: v for v in pod["volumes"]}["cluster-tls"]
            self.assertEqual(volume["secret"]["secretName"], f"{RELEASE}-tessera-cluster-tls")
            mount = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}["cluster-tls"]
            self.assertEqual(mount["mountPath"], self.MOUNT)
            self.assertNotIn("subPath", mount)  # The kubelet updates a folder mount: renewals arrive.
        self.assertEqual(by_kind(objs, "Certificate"), [])

    def test_insecure_only_when_explicitly_disabled(self):
        _, coordinator, worker = self.pods(VALUE_SETS["cluster_plaintext"])
        self.assertIn("--insecure", coordinator["containers"][0]["args"])
        self.assertIn("--insecure", worker["containers"][0]["args"][0])
        self.assertNotIn("--cluster-ca", worker["containers"][0]["args"][0])
        for pod in (coordinator, worker):
            self.assertNotIn("cluster-tls", [v["name"] for v in pod["volumes"]])

    def test_cert_manager_certificate_carries_the_server_name(self):
        objs, coordinator, worker = self.pods(VALUE_SETS["cluster_tls_cert_manager"])
        certs = by_kind(objs, "Certificate")
        self.assertEqual(len(certs), 1)
        spec = certs[0]["spec"]
        self.assertEqual(spec["secretName"], f"{RELEASE}-tessera-cluster-tls")
        self.assertEqual(spec["dnsNames"], ["tessera.cluster.internal"])
        self.assertIn("client auth", spec["usages"])
        self.assertIn("server auth", spec["usages"])
        self.assertEqual(spec["issuerRef"]["name"], "tessera-cluster-ca")
        self.assertIn("--cluster-server-name=tessera.cluster.internal", worker["containers"][0]["args"][0])
        with self.assertRaises(helm_python.HelmRenderError):
            objects({"cluster": {"tls": {"certManager": {"enabled": True}}}})

    def test_own_secret_name(self):
        _, coordinator, _ = self.pods({"cluster": {"tls": {"secretName": "my-cluster-certs"}}})
        volume = {v["name"]: v for v in coordinator["volumes"]}["cluster-tls"]
        self.assertEqual(volume["secret"]["secretName"], "my-cluster-certs")


class ChartTlsTest(unittest.TestCase):
    MOUNT = "/etc/tessera/tls"

    def coordinator(self, values):
        objs = objects(values)
        pod = component_template(objs, "coordinator")["spec"]
        return objs, pod, pod["containers"][0]

    def test_tls_by_default_from_the_release_secret(self):
        objs, pod, c = self.coordinator({})
        self.assertIn(f"--tls-cert={self.MOUNT}/tls.crt", c["args"])
        self.assertIn(f"--tls-key={self.MOUNT}/tls.key", c["args"])
        volume = [v for v in pod["volumes"] if v["name"] == "tls"][0]
        self.assertEqual(volume["secret"]["secretName"], f"{RELEASE}-tessera-tls")
        test_pod = by_kind(objs, "Pod")[0]
        self.assertIn(f"--tls-ca={self.MOUNT}/ca.crt", test_pod["spec"]["containers"][0]["args"])

    def test_plaintext_only_when_disabled(self):
        objs, pod, c = self.coordinator({"tls": {"enabled": False}})
        self.assertFalse([a for a in c["args"] if a.startswith("--tls")])
        self.assertNotIn("tls", [v["name"] for v in pod["volumes"]])
        self.assertEqual(by_kind(objs, "Certificate"), [])

    def test_secret_is_mounted_whole_and_flags_point_into_it(self):
        objs, pod, c = self.coordinator({"tls": {"secretName": "tessera-tls"}})
        self.assertIn(f"--tls-cert={self.MOUNT}/tls.crt", c["args"])
        self.assertIn(f"--tls-key={self.MOUNT}/tls.key", c["args"])
        self.assertFalse([a for a in c["args"] if a.startswith("--tls-client-ca")])
        volume = [v for v in pod["volumes"] if v["name"] == "tls"][0]
        self.assertEqual(volume["secret"]["secretName"], "tessera-tls")
        mount = [m for m in c["volumeMounts"] if m["name"] == "tls"][0]
        self.assertEqual(mount["mountPath"], self.MOUNT)
        # A subPath mount is never updated by the kubelet: rotation would need a restart.
        self.assertNotIn("subPath", mount)
        self.assertEqual(by_kind(objs, "Certificate"), [])
        test_pod = by_kind(objs, "Pod")[0]
        self.assertIn(f"--tls-ca={self.MOUNT}/ca.crt", test_pod["spec"]["containers"][0]["args"])
        self.assertEqual(test_pod["spec"]["volumes"][0]["secret"]["secretName"], "tessera-tls")

    def test_cert_manager_certificate_names_the_service(self):
        objs, pod, c = self.coordinator(VALUE_SETS["tls_cert_manager_mtls"])
        certs = by_kind(objs, "Certificate")
        self.assertEqual(len(certs), 1)
        spec = certs[0]["spec"]
        secret = f"{RELEASE}-tessera-tls"
        self.assertEqual(spec["secretName"], secret)
        self.assertEqual(spec["issuerRef"], {"name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
        svc = f"{RELEASE}-tessera-coordinator"
        self.assertIn(f"{svc}.{NAMESPACE}.svc", spec["dnsNames"])
        self.assertIn("llm.example.com", spec["dnsNames"])
        self.assertIn("client auth", spec["usages"])
        self.assertEqual([v for v in pod["volumes"] if v["name"] == "tls"][0]["secret"]["secretName"], secret)
        self.assertIn(f"--tls-client-ca={self.MOUNT}/ca.crt", c["args"])
        test_args = by_kind(objs, "Pod")[0]["spec"]["containers"][0]["args"]
        self.assertIn(f"--tls-cert={self.MOUNT}/tls.crt", test_args)

    def test_cert_manager_needs_an_issuer(self):
        with self.assertRaises(Exception):
            render({"tls": {"certManager": {"enabled": True}}})


class ReadmeExampleTest(unittest.TestCase):
    def test_the_70b_example_in_the_readme_deploys(self):
        text = open(os.path.join(SOURCE_DIR, "README.md")).read()
        section = text.split("## Deploy on Kubernetes", 1)[1]
        example = yaml.safe_load(section.split("```yaml", 1)[1].split("```", 1)[0])
        with helm_python.Chart.load(CHART_DIR) as chart:
            chart.validate_schema(merged(example))
        objs = objects(example)
        lws = by_kind(objs, "LeaderWorkerSet")[0]["spec"]
        self.assertEqual(lws["replicas"] * lws["leaderWorkerTemplate"]["size"], 16)
        worker = lws["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
        self.assertEqual(worker["resources"]["limits"]["nvidia.com/gpu"], 1)
        for obj in objs:
            if not obj["apiVersion"].startswith(CRD_GROUPS):
                kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


class ValuesSchemaTest(unittest.TestCase):
    def assertRejected(self, values, where):
        with helm_python.Chart.load(CHART_DIR) as chart:
            with self.assertRaises(helm_python.HelmValuesError) as e:
                chart.validate_schema(merged(values))
        self.assertIn(where, str(e.exception))

    def test_value_sets_are_accepted(self):
        with helm_python.Chart.load(CHART_DIR) as chart:
            for name, values in VALUE_SETS.items():
                with self.subTest(values=name):
                    chart.validate_schema(merged(values))

    def test_tp_must_be_a_positive_integer(self):
        for bad in (0, -8, 1.5, "8"):
            with self.subTest(tp=bad):
                self.assertRejected({"tp": bad}, "/tp")

    def test_replicas_must_be_positive(self):
        for bad in (0, -1, "2"):
            with self.subTest(replicas=bad):
                self.assertRejected({"replicas": bad}, "/replicas")

    def test_gpu_resource_must_be_an_extended_resource_name(self):
        for bad in ("gpu", "nvidia.com/", "/gpu", "NVIDIA.com/gpu", "nvidia.com/gpu count", "cpu"):
            with self.subTest(gpuResource=bad):
                self.assertRejected({"worker": {"gpuResource": bad}}, "/worker/gpuResource")
        for bad in (-1, 0.5):
            with self.subTest(gpusPerWorker=bad):
                self.assertRejected({"worker": {"gpusPerWorker": bad}}, "/worker/gpusPerWorker")

    def test_other_impossible_values(self):
        self.assertRejected({"coordinator": {"port": 70000}}, "/coordinator/port")
        self.assertRejected({"model": {"source": "s3"}}, "/model/source")
        self.assertRejected({"model": {"path": "relative/dir"}}, "/model/path")
        self.assertRejected({"coordinator": {"kvMemoryFraction": 1.5}}, "/coordinator/kvMemoryFraction")
        self.assertRejected({"coordinator": {"gpuMemoryUtilization": 1.5}}, "/coordinator/gpuMemoryUtilization")
        self.assertRejected({"coordinator": {"gpuMemoryUtilization": -0.1}}, "/coordinator/gpuMemoryUtilization")
        self.assertRejected({"coordinator": {"speculative": {"method": "medusa"}}}, "/coordinator/speculative/method")
        self.assertRejected({"coordinator": {"speculative": {"numTokens": 0}}}, "/coordinator/speculative/numTokens")
        # A typo is an error, not a silently ignored key.
        self.assertRejected({"worker": {"gpus": 8}}, "/worker")
        self.assertRejected({"replica": 2}, "replica")

    def test_install_refuses_bad_values(self):
        with self.assertRaises(helm_python.HelmValuesError):
            render({"tp": 0})


if __name__ == "__main__":
    unittest.main()
