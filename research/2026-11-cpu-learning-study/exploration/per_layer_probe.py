"""Scratch: probe each layer's paper feature (logistic regression) for a few encoders, to see where features degrade."""
import json, sys
from pathlib import Path
import numpy as np, soundfile as sf, torch
from sklearn.linear_model import LogisticRegression
from aasp_hf import AaspFeatureExtractor, AaspModel
from aasp_hf.evaluation import pool_features, standardization_stats, standardize
torch.set_num_threads(1)
data = Path("/work/main/benchmarks/quality/data/tasks")
fe = AaspFeatureExtractor()
def items(task, split):
    return [(f, d.name) for d in sorted((data / task / split).iterdir()) for f in sorted(d.glob("*.wav"))]
def waves(its, n=24000):
    out = []
    for f, _ in its:
        a, sr = sf.read(f, dtype="float32", always_2d=True); a = a.mean(1)[:n]
        out.append(np.pad(a, (0, n - len(a))))
    return out
res = {}
for name in sys.argv[1:]:
    model = AaspModel.from_pretrained(name).eval()
    res[name] = {}
    for task in ("instrument", "pitch", "speech"):
        feats = {}
        for split in ("train", "test"):
            its = items(task, split)
            layers = None
            with torch.no_grad():
                for i in range(0, len(its), 64):
                    x = fe(waves(its[i:i+64]), sampling_rate=16000, return_tensors="pt")["input_values"]
                    hs = model(x, output_hidden_states=True).hidden_states
                    f = [pool_features(h, None, model.config.num_frequency_patches).numpy() for h in hs]
                    layers = f if layers is None else [np.concatenate([a, b]) for a, b in zip(layers, f)]
            labels = sorted({l for _, l in items(task, "train")})
            feats[split] = (layers, np.array([labels.index(l) for _, l in its]))
        accs = []
        for l in range(len(feats["train"][0])):
            m, s = standardization_stats(feats["train"][0][l])
            clf = LogisticRegression(C=0.1, max_iter=300).fit(standardize(feats["train"][0][l], m, s), feats["train"][1])
            accs.append(round(float((clf.predict(standardize(feats["test"][0][l], m, s)) == feats["test"][1]).mean()), 4))
        res[name][task] = accs
        print(json.dumps({"encoder": name, "task": task, "per_layer": accs}), flush=True)
