"""Fixtures of the external tests: a real `fanfare serve --simulator` process on a free loopback port.

FANFARE_BIN names the binary (scripts/test-external sets it to the one scripts/test built). Each service gets
its own temporary folder (registry, key file, simulator log, the process's output), removed afterwards; the
process is stopped with SIGTERM (and must exit 0), or killed if it does not stop in time.
"""

import ctypes
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time

import pytest
import requests

# Everything the tests wait for has a deadline: generous, because the machine may be loaded.
START_DEADLINE_S = 120
STOP_DEADLINE_S = 60


def binary():
    path = os.environ.get("FANFARE_BIN")
    if not path:
        pytest.exit("FANFARE_BIN is not set: run the tests through scripts/test-external", returncode=2)
    if not os.access(path, os.X_OK):
        pytest.exit(f"FANFARE_BIN={path} is not an executable", returncode=2)
    return path


def die_with_parent():
    """Runs in the child before exec: SIGKILL it when the test process dies, so no server outlives a killed run."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def wait_until(condition, deadline_s, what):
    """Polls `condition` until it returns something truthy; fails with `what` when the deadline passes."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
        time.sleep(0.05)


def random_token(prefix="1"):
    """A 32-byte token in hex. The simulator answers 410 for the prefix 0410 and 400 for 0400; the default
    prefix keeps a random token clear of both."""
    return prefix + secrets.token_hex(32)[len(prefix):]


def update_registration(token, channels, activity=None):
    return {"token": token, "kind": "update", "channels": channels, "activity_id": activity or ("act-" + token[:16])}


class Service:
    """One `fanfare serve --simulator` process and an HTTP session to it."""

    def __init__(self, folder, api_keys=None, simulator_latency="uniform:10ms-30ms", extra=()):
        self.folder = folder
        self.output_path = os.path.join(folder, "serve.log")
        self.simulator_log = os.path.join(folder, "accepted.jsonl")
        arguments = [
            binary(), "serve", "--simulator", "--listen", "127.0.0.1:0",
            "--database", os.path.join(folder, "fanfare.db"),
            "--simulator-latency", simulator_latency, "--simulator-log", self.simulator_log,
            "--shutdown-timeout", "20s", *extra,
        ]
        self.key = None
        if api_keys is not None:
            path = os.path.join(folder, "api-keys")
            with open(path, "w") as file:
                for key, scopes in api_keys.items():
                    file.write(f"{key} {scopes}\n")
            arguments += ["--api-keys", path]
        self.output = open(self.output_path, "wb")
        self.process = subprocess.Popen(arguments, stdout=self.output, stderr=subprocess.STDOUT, cwd=folder,
                                        preexec_fn=die_with_parent)
        self.http = requests.Session()
        self.base = wait_until(self._listening, START_DEADLINE_S, "fanfare serve to print its address")
        wait_until(self._ready, START_DEADLINE_S, "GET /readyz to answer 200")

    def log_tail(self, lines=40):
        self.output.flush()
        with open(self.output_path, "rb") as file:
            return b"".join(file.readlines()[-lines:]).decode("utf-8", "replace")

    def _listening(self):
        if self.process.poll() is not None:
            raise AssertionError(f"fanfare serve exited with {self.process.returncode}:\n{self.log_tail()}")
        with open(self.output_path, "rb") as file:
            match = re.search(rb"listening on (http://[0-9.]+:[0-9]+)", file.read())
        return match and match.group(1).decode()

    def _ready(self):
        if self.process.poll() is not None:
            raise AssertionError(f"fanfare serve exited with {self.process.returncode}:\n{self.log_tail()}")
        try:
            return self.http.get(self.base + "/readyz", timeout=5).status_code == 200
        except requests.ConnectionError:
            return False

    def request(self, method, path, key=None, **kwargs):
        headers = kwargs.pop("headers", {})
        key = key or self.key
        if key:
            headers["Authorization"] = "Bearer " + key
        kwargs.setdefault("timeout", 60)
        return self.http.request(method, self.base + path, headers=headers, **kwargs)

    def register(self, tokens, channels, batch=10_000):
        for start in range(0, len(tokens), batch):
            items = [update_registration(token, channels) for token in tokens[start:start + batch]]
            response = self.request("POST", "/v1/tokens", json={"tokens": items})
            assert response.status_code == 200, response.text
            assert response.json() == {"registered": len(items), "replaced": 0}

    def publish(self, channel, **update):
        body = {"event": "update", "content_state": {"home": 0, "away": 0}, **update}
        response = self.request("POST", f"/v1/channels/{channel}/updates", json=body)
        assert response.status_code == 202, response.text
        return response.json()["wave_id"]

    def wave(self, wave_id):
        response = self.request("GET", f"/v1/waves/{wave_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def wait_complete(self, wave_id, deadline_s=120):
        return wait_until(
            lambda: (lambda report: report if report["state"] == "complete" else None)(self.wave(wave_id)),
            deadline_s, f"wave {wave_id} to complete")

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"fanfare serve did not stop within {STOP_DEADLINE_S} s of SIGTERM:\n{self.log_tail()}")
        self.http.close()
        self.output.close()
        return self.process.returncode


@pytest.fixture
def folder():
    path = tempfile.mkdtemp(prefix="fanfare-external-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_service(folder):
    """Starts services in the test's folder; stops each at the end and checks it exited 0."""
    started = []

    def start(**options):
        service = Service(tempfile.mkdtemp(dir=folder), **options)
        started.append(service)
        return service

    yield start
    codes = [(service, service.stop()) for service in started]
    for service, code in codes:
        assert code == 0, f"fanfare serve exited with {code} after SIGTERM:\n{service.log_tail()}"
