"""schemathesis (property-based, from the served OpenAPI document) against a running `fanfare serve --simulator`.

Checks: no 5xx, and every response's status code, content type, headers and body conform to the document.
Bounded by examples per operation (FANFARE_SCHEMATHESIS_EXAMPLES, 30 by default: about half a minute on two
cores) and a fixed seed (FANFARE_SCHEMATHESIS_SEED) so a failure can be replayed. Any failure fails the test.
"""

import os
import subprocess
import sys

from conftest import random_token

CHECKS = ",".join([
    "not_a_server_error", "status_code_conformance", "content_type_conformance", "response_headers_conformance",
    "response_schema_conformance",
])


def test_every_answer_conforms_to_the_served_openapi_document(start_service, folder):
    admin = "schemathesis-" + random_token()[:32]
    service = start_service(api_keys={admin: "admin"}, simulator_latency="0")
    schemathesis = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    command = [
        schemathesis, "run", service.base + "/openapi.yaml",
        "--header", f"Authorization: Bearer {admin}",
        "--checks", CHECKS,
        # Examples (the document has none), coverage (boundary and invalid values of every field) and fuzzing.
        "--phases", "examples,coverage,fuzzing",
        "--max-examples", os.environ.get("FANFARE_SCHEMATHESIS_EXAMPLES", "30"),
        "--seed", os.environ.get("FANFARE_SCHEMATHESIS_SEED", "1"),
        # One worker: with two threads, CPython 3.11's ast.parse (called by hypothesis to describe its filters)
        # can fail with "AST constructor recursion depth mismatch" (a race in the interpreter, not the server).
        "--workers", "1",
        "--request-timeout", "30",
        # The key is a throwaway; show requests exactly as sent so a failure can be replayed with curl.
        "--output-sanitize", "false",
        "--output-truncate", "false",
    ]
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_TELEMETRY": "false"})
    assert result.returncode == 0, (
        f"schemathesis found problems (exit {result.returncode}):\n{result.stdout[-30000:]}\n{result.stderr[-5000:]}")
    assert service.process.poll() is None, f"fanfare serve died during the run:\n{service.log_tail()}"
