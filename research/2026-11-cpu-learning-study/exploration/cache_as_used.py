import sys, glob, json
from aasp_hf.data.cache import build_log_mel_cache
root = sys.argv[1]; out = sys.argv[2]; folders = sys.argv[3:]
paths = sorted(p for f in folders for p in glob.glob(f"{root}/{f}/**/*.wav", recursive=True))
print(len(paths), "files", flush=True)
s = build_log_mel_cache(paths, out)
print(json.dumps({k: v for k, v in s.items() if k != "failed"}))
