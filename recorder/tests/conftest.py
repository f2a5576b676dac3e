"""Shared by the recorder's tests: the package from this checkout, the report schema,
and a helper that trains one planted family under the recorder."""

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDER_ROOT = os.path.dirname(HERE)
REPO_ROOT = os.path.dirname(RECORDER_ROOT)
sys.path.insert(0, RECORDER_ROOT)
sys.path.insert(0, HERE)

SCHEMA_PATH = os.path.join(REPO_ROOT, "reports", "schema", "report.schema.json")


@pytest.fixture(scope="session")
def schema():
    if not os.path.exists(SCHEMA_PATH):
        pytest.skip(f"{SCHEMA_PATH} not found: the tests validate against the repository's schema")
    with open(SCHEMA_PATH) as f:
        return json.load(f)


@pytest.fixture
def validate(schema):
    """Checks a report dict as its JSON bytes read back, against the schema."""
    jsonschema = pytest.importorskip("jsonschema")
    from ampcheck_recorder import report as report_mod

    def check(report):
        data = json.loads(report_mod.to_json(report))
        jsonschema.validate(data, schema)
        return data

    return check


@pytest.fixture
def record(validate):
    """record(name, steps=..., recorder options..., training options...) -> (report, observed):
    trains the family under a Recorder, validates its report against the schema, and
    returns it with what PyTorch itself reported each step."""
    import families as fam
    from ampcheck_recorder import Recorder

    def run(name, steps=4, seed=0, inspect="stats", fp32_ops=(), fp32_modules=(), **train_kwargs):
        model, x, y, settings = fam.make(name, seed)
        settings.update(train_kwargs)
        observed = []
        rec = Recorder(model, inspect=inspect, fp32_ops=fp32_ops, fp32_modules=fp32_modules)
        try:
            fam.train(model, x, y, steps=steps, observe=lambda s, info: observed.append(info), **settings)
        finally:
            report = rec.close()
        validate(report)
        return report, observed

    return run
