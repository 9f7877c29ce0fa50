"""Loading never touches the network unless asked to: building from a state dict (`from_pretrained(None, config=...,
state_dict=...)`, transformers' documented way) and loading a local folder, with and without an explicit config,
request nothing. The check runs in a fresh interpreter that is NOT told to be offline (the suite's conftest sets
HF_HUB_OFFLINE=1, which would hide a request) and whose every socket connection attempt is recorded and refused."""

import json
import os
import subprocess
import sys
import textwrap

from conftest import tiny_config_kwargs

SCRIPT = """
import json, socket, sys, time
attempts = []
def refuse(self, address, *args, **kwargs):
    attempts.append(repr(address))
    raise OSError("network blocked by the test")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = lambda address, *a, **k: refuse(None, address)

import torch
from transformers import AutoModel
from aasp_hf import AaspConfig, AaspForAudioClassification, AaspModel

config = AaspConfig(**json.loads(sys.argv[1]))
folder = sys.argv[2]
model = AaspModel(config)
model.save_pretrained(folder)
timings = {}
for name, load in {
    "state_dict": lambda: AaspModel.from_pretrained(None, config=config, state_dict=model.state_dict()),
    "empty state_dict": lambda: AaspForAudioClassification.from_pretrained(None, config=config, state_dict={}),
    "folder": lambda: AaspModel.from_pretrained(folder),
    "folder and config": lambda: AaspModel.from_pretrained(folder, config=config),
    "AutoModel folder": lambda: AutoModel.from_pretrained(folder),
}.items():
    start = time.perf_counter()
    load()
    timings[name] = time.perf_counter() - start
print(json.dumps({"attempts": attempts, "timings": timings}))
"""


def test_loading_from_none_or_a_local_folder_requests_nothing(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
    }
    env["HF_HOME"] = str(tmp_path / "hf_home")  # no cached token or files from elsewhere
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), json.dumps(tiny_config_kwargs()), str(tmp_path / "model")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["attempts"] == [], report
    assert set(report["timings"]) == {
        "state_dict",
        "empty state_dict",
        "folder",
        "folder and config",
        "AutoModel folder",
    }
