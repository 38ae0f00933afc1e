#!/usr/bin/env python3
"""Checks of the container images (deploy/docker) without a Docker engine.

hadolint lints both Dockerfiles; structural tests pin what the images promise (pinned
bases, multi-stage, non-root, a health check, the three binaries, no build tree in the
context); the two helper scripts the images ship are run for real: the runtime-library
resolver on real binaries and the health probe against a local HTTP server.
"""
import fnmatch
import http.server
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import unittest

SOURCE_DIR = os.environ.get("TESSERA_SOURCE_DIR",
                            os.path.join(os.path.dirname(__file__), "..", ".."))
DOCKER_DIR = os.path.join(SOURCE_DIR, "deploy", "docker")
DOCKERFILES = ("Dockerfile.cpu", "Dockerfile.cuda")


def hadolint_binary():
    found = shutil.which("hadolint")
    if found:
        return found
    candidate = os.path.join(sysconfig.get_path("scripts"), "hadolint")
    return candidate if os.path.exists(candidate) else None


def stages(path):
    """[(base image, stage name or None, [instruction lines])] with continuations joined."""
    text = open(path).read()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", line, re.IGNORECASE)
        if m:
            out.append((m.group(1), m.group(2), []))
        elif out:
            out[-1][2].append(line)
    return out


def instructions(stage, keyword):
    return [l for l in stage[2] if l.split()[0].upper() == keyword]


class DockerfileTest(unittest.TestCase):
    def test_hadolint_is_clean(self):
        binary = hadolint_binary()
        self.assertIsNotNone(binary, "hadolint not found; run scripts/setup.sh (requirements-dev.txt)")
        for name in DOCKERFILES:
            with self.subTest(dockerfile=name):
                r = subprocess.run([binary, "--no-color", os.path.join(DOCKER_DIR, name)],
                                   capture_output=True, text=True, timeout=120)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_multi_stage_with_pinned_bases(self):
        for name in DOCKERFILES:
            with self.subTest(dockerfile=name):
                s = stages(os.path.join(DOCKER_DIR, name))
                self.assertEqual(len(s), 2, "a build stage and a runtime stage")
                self.assertEqual(s[0][1], "build")
                for image, _, _ in s:
                    repo, _, tag = image.partition(":")
                    self.assertTrue(tag, f"{image}: no tag")
                    self.assertNotEqual(tag, "latest")
                    self.assertRegex(tag, r"\d+\.\d+", f"{image}: the tag names no version")
        cpu = stages(os.path.join(DOCKER_DIR, "Dockerfile.cpu"))
        for image, _, _ in cpu:
            self.assertRegex(image, r"^debian:12\.\d+-slim$")
        cuda = stages(os.path.join(DOCKER_DIR, "Dockerfile.cuda"))
        build = re.match(r"^nvidia/cuda:(13\.0\.\d+)-devel-ubuntu24\.04$", cuda[0][0])
        run = re.match(r"^nvidia/cuda:(13\.0\.\d+)-runtime-ubuntu24\.04$", cuda[1][0])
        self.assertTrue(build and run, [c[0] for c in cuda])
        self.assertEqual(build.group(1), run.group(1), "devel and runtime images of one CUDA release")

    def test_build_stage_builds_the_three_binaries(self):
        for name in DOCKERFILES:
            with self.subTest(dockerfile=name):
                build = stages(os.path.join(DOCKER_DIR, name))[0]
                runs = " ".join(instructions(build, "RUN"))
                self.assertRegex(runs, r"ninja -C /build tessera tessera-coordinator tessera-worker")
                self.assertIn("runtime-packages.sh", runs)
                cuda = "-DTESSERA_ENABLE_CUDA=ON" in runs
                self.assertEqual(cuda, name.endswith("cuda"))

    def test_runtime_stage_is_small_non_root_and_health_checked(self):
        for name in DOCKERFILES:
            with self.subTest(dockerfile=name):
                runtime = stages(os.path.join(DOCKER_DIR, name))[1]
                runs = " ".join(instructions(runtime, "RUN"))
                self.assertNotRegex(runs, r"-dev\b", "no development packages at run time")
                self.assertNotIn("build-essential", runs)
                users = instructions(runtime, "USER")
                self.assertTrue(users)
                user = users[-1].split()[1].split(":")[0]
                self.assertTrue(user.isdigit() and int(user) != 0, users[-1])
                copies = " ".join(instructions(runtime, "COPY"))
                self.assertIn("--from=build /out/bin/ /usr/local/bin/", copies)
                health = instructions(runtime, "HEALTHCHECK")
                self.assertEqual(len(health), 1)
                self.assertIn("tessera-healthcheck", health[0])
                self.assertIn("VOLUME [\"/tmp\"]", runtime[2])

    def test_dockerignore_keeps_sources_and_drops_build_trees(self):
        for name in DOCKERFILES:
            with self.subTest(dockerfile=name):
                path = os.path.join(DOCKER_DIR, name + ".dockerignore")
                patterns = [l.strip() for l in open(path) if l.strip() and not l.startswith("#")]

                def ignored(rel):
                    parts = rel.split("/")
                    return any(fnmatch.fnmatch("/".join(parts[:i]), p)
                               for p in patterns for i in range(1, len(parts) + 1))

                for rel in (".git/HEAD", "build/CMakeCache.txt", "build-deploy/bin/tessera"):
                    self.assertTrue(ignored(rel), rel)
                for rel in ("CMakeLists.txt", "cmake/Dependencies.cmake", "proto/CMakeLists.txt",
                            "common/CMakeLists.txt", "coordinator/main.cc", "worker/CMakeLists.txt",
                            "kernels/CMakeLists.txt", "tools/CMakeLists.txt",
                            "deploy/docker/runtime-packages.sh", "deploy/docker/tessera-healthcheck"):
                    self.assertFalse(ignored(rel), rel)


class RuntimePackagesTest(unittest.TestCase):
    SCRIPT = os.path.join(DOCKER_DIR, "runtime-packages.sh")

    def run_script(self, *args):
        return subprocess.run(["sh", self.SCRIPT, *args], capture_output=True, text=True, timeout=120)

    def test_resolves_the_packages_of_real_binaries(self):
        binaries = [shutil.which("ls")]
        bin_dir = os.environ.get("TESSERA_BIN_DIR", "")
        for b in ("tessera", "tessera-coordinator", "tessera-worker"):
            if bin_dir and os.path.exists(os.path.join(bin_dir, b)):
                binaries.append(os.path.join(bin_dir, b))
        r = self.run_script(*binaries)
        self.assertEqual(r.returncode, 0, r.stderr)
        packages = r.stdout.split()
        self.assertIn("libc6", packages)
        self.assertEqual(packages, sorted(set(packages)))
        self.assertFalse([p for p in packages if p.endswith("-dev")], packages)
        if len(binaries) > 1:  # Built binaries: gRPC and protobuf must be found.
            self.assertTrue(any(p.startswith("libgrpc++") for p in packages), packages)
            self.assertTrue(any(p.startswith("libprotobuf") for p in packages), packages)

    def test_fails_on_a_missing_binary(self):
        r = self.run_script("/nonexistent/tessera")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("/nonexistent/tessera", r.stderr)


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = 200 if self.path == "/healthz" else 503
        body = b"ok\n" if code == 200 else b"not ready\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # The probe hangs up after the status line; that reset is expected.


class HealthcheckTest(unittest.TestCase):
    SCRIPT = os.path.join(DOCKER_DIR, "tessera-healthcheck")

    @classmethod
    def setUpClass(cls):
        cls.server = _QuietServer(("127.0.0.1", 0), _Handler)
        cls.port = cls.server.server_address[1]
        cls.thread = threading.Thread(target=cls.server.serve_forever, daemon=True)
        cls.thread.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def probe(self, *args, env=None):
        full_env = dict(os.environ, **(env or {}))
        return subprocess.run(["bash", self.SCRIPT, *args], capture_output=True, text=True,
                              timeout=30, env=full_env)

    def test_healthy_endpoint_passes(self):
        r = self.probe(str(self.port))
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.probe(env={"TESSERA_HEALTH_PORT": str(self.port)})
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_unhealthy_endpoint_fails_with_the_answer(self):
        r = self.probe(str(self.port), "/readyz")
        self.assertEqual(r.returncode, 1)
        self.assertIn("503", r.stderr)

    def test_closed_port_fails(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        r = self.probe(str(port))
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot connect", r.stderr)


if __name__ == "__main__":
    unittest.main()
