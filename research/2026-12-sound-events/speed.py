"""Frame inference against clip inference: the same encoder (a run's saved frame classifier, and a clip classifier
with the same encoder weights and a head of the same size) reads the same test recordings in windows of the trained
length, through `pipeline("sound-event-detection")` and `pipeline("audio-classification")`, alternately, the same
number of times each; the ratio of their times in one run (the machine is shared: compare ratios, not seconds).

    python research/2026-12-sound-events/speed.py --run /tmp/study/seed0 --data /tmp/sed_data --repeats 3
"""

import argparse
import json
import time
from pathlib import Path

import soundfile as sf
import torch

import aasp_hf
from aasp_hf import AaspFeatureExtractor, AaspForAudioClassification, AaspForAudioFrameClassification


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    frame_model = AaspForAudioFrameClassification.from_pretrained(args.run).eval()
    clip_model = AaspForAudioClassification(frame_model.config).eval()
    clip_model.load_state_dict(frame_model.state_dict())  # the same encoder and head weights
    extractor = AaspFeatureExtractor.from_pretrained(args.run)
    detector = aasp_hf.AaspSoundEventDetectionPipeline(model=frame_model, feature_extractor=extractor)
    classifier = aasp_hf.AaspAudioClassificationPipeline(model=clip_model, feature_extractor=extractor)
    files = sorted(Path(args.data, "test").glob("*.wav"))
    audio = [sf.read(f, dtype="float32")[0] for f in files]
    inputs = [{"raw": a, "sampling_rate": 8000} for a in audio]
    seconds = sum(len(a) for a in audio) / 8000
    times = {"frame": 0.0, "clip": 0.0}
    with torch.inference_mode():
        detector(inputs[0]), classifier(inputs[0])  # warm-up
        for _ in range(args.repeats):
            for name, run in (("frame", detector), ("clip", classifier)):
                started = time.perf_counter()
                for x in inputs:
                    run(x)
                times[name] += time.perf_counter() - started
    result = {
        "audio_seconds_per_repeat": seconds,
        "repeats": args.repeats,
        "frame_pipeline_s": times["frame"],
        "clip_pipeline_s": times["clip"],
        "frame_over_clip": times["frame"] / times["clip"],
        "frame_real_time_factor": seconds * args.repeats / times["frame"],
        "clip_real_time_factor": seconds * args.repeats / times["clip"],
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
