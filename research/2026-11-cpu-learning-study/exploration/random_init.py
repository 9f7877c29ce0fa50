import json, sys, torch
from aasp_hf import AaspConfig, AaspForPreTraining
cfg = json.load(open("/tmp/exp/base.json"))["model_config"]
cfg.update(json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})
torch.manual_seed(int(sys.argv[2]))
m = AaspForPreTraining(AaspConfig(**cfg))
m.aasp.save_pretrained(sys.argv[1])
