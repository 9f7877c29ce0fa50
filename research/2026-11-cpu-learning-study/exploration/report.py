"""Format this session's exploration (probe_encoders.py JSONs + pretrain.py logs) as Markdown + a PNG."""
import json, sys
from pathlib import Path
import numpy as np
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

out = Path(sys.argv[1])
probes = {}
for f in sys.argv[2:]:
    if Path(f).is_file():
        probes.update(json.loads(Path(f).read_text()))
acc = {n: {t: r["accuracy"] for t, r in v["tasks"].items()} for n, v in probes.items()}
tasks = ["instrument", "pitch", "speech"]
rows = []
for n, a in acc.items():
    rows.append((n, *[a.get(t, float("nan")) for t in tasks], float(np.mean([a[t] for t in tasks]))))
(out / "probes.json").write_text(json.dumps(acc, indent=1))
lines = ["| encoder | " + " | ".join(tasks) + " | average |", "|---|" + "---|" * (len(tasks) + 1)]
for r in rows:
    lines.append(f"| {r[0]} | " + " | ".join(f"{100*x:.1f}" for x in r[1:]) + " |")
(out / "probes.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
# in-training probe curves (instrument, 300 clips/split, ridge on the paper feature)
fig, ax = plt.subplots(1, 2, figsize=(10, 4))
curves = {}
for log in sorted(Path("/tmp/exp/runs").glob("*/log_history.jsonl")):
    name = log.parent.name
    pts = [json.loads(l) for l in log.read_text().splitlines()]
    pts = [p for p in pts if "probe/student_ridge_accuracy" in p]
    curves[name] = [{k: p[k] for k in p if k.startswith("probe/") or k == "step"} for p in pts]
    for i, who in enumerate(("student", "teacher")):
        ax[i].plot([p["step"] for p in pts], [p[f"probe/{who}_ridge_accuracy"] for p in pts], marker="o", label=name)
for i, who in enumerate(("student", "teacher")):
    ax[i].set_title(f"{who}: instrument probe (ridge, 300 clips/split)"); ax[i].set_xlabel("pre-training step")
    ax[i].set_ylabel("test accuracy"); ax[i].grid(alpha=.3)
ax[0].legend(fontsize=7)
fig.tight_layout(); fig.savefig(out / "probe_vs_step.png", dpi=110)
(out / "probe_vs_step.json").write_text(json.dumps(curves, indent=1))
