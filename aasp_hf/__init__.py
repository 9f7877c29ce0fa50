"""aasp_hf: AaSP (Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers) for transformers.

Importing the package registers the classes with the transformers Auto* factories, and marks them for
`save_pretrained` to ship their code (`auto_map`), so a saved checkpoint loads with `trust_remote_code=True`
where this package is not installed.
"""

import importlib.util
import sys
import warnings

# TensorFlow exports its LLVM symbols to the whole process, and Triton's LLVM, loaded after it, crashes in its static
# initialisers (a segfault); importing transformers' model code makes torch load Triton (torch._dynamo). HEAR's
# validator and runner (hearvalidator, heareval) import TensorFlow before they import `aasp_hf.hear`: in their
# processes, which exist to run this package, torch runs without Triton (it needs none on the CPU). Any other process
# keeps its torch as it is; where TensorFlow came first, a warning says how to avoid the crash.
if "tensorflow" in sys.modules and "triton" not in sys.modules and "torch._dynamo" not in sys.modules:
    if "hearvalidator" in sys.modules or "heareval" in sys.modules:
        sys.modules["triton"] = None  # `import triton` now raises ImportError, which torch takes as "not installed"
    elif importlib.util.find_spec("triton") is not None:
        warnings.warn(
            "TensorFlow was imported before aasp_hf: loading Triton (torch imports it with transformers' model code) "
            "after TensorFlow can crash the process. Import aasp_hf (or torch._dynamo) before TensorFlow.",
            stacklevel=2,
        )

from transformers import (  # noqa: E402
    AutoConfig,
    AutoFeatureExtractor,
    AutoModel,
    AutoModelForAudioClassification,
    AutoModelForAudioFrameClassification,
    AutoModelForPreTraining,
)

from .configuration_aasp import AaspConfig
from .feature_extraction_aasp import AaspFeatureExtractor
from .modeling_aasp import (
    AaspAudioFrameClassifierOutput,
    AaspForAudioClassification,
    AaspForAudioFrameClassification,
    AaspForPreTraining,
    AaspForPreTrainingOutput,
    AaspModel,
    AaspModelOutput,
    AaspPreTrainedModel,
)
from .pipeline_aasp import (
    AaspAudioClassificationPipeline,
    AaspSoundEventDetectionPipeline,
    register_sound_event_detection,
    score_audio_classification_by_problem_type,
)

__version__ = "0.1.0"

AutoConfig.register(AaspConfig.model_type, AaspConfig, exist_ok=True)
AutoModel.register(AaspConfig, AaspModel, exist_ok=True)
AutoModelForAudioClassification.register(AaspConfig, AaspForAudioClassification, exist_ok=True)
AutoModelForAudioFrameClassification.register(AaspConfig, AaspForAudioFrameClassification, exist_ok=True)
AutoModelForPreTraining.register(AaspConfig, AaspForPreTraining, exist_ok=True)
AutoFeatureExtractor.register(AaspConfig, AaspFeatureExtractor, exist_ok=True)

AaspConfig.register_for_auto_class()
AaspModel.register_for_auto_class("AutoModel")
AaspForAudioClassification.register_for_auto_class("AutoModelForAudioClassification")
AaspForAudioFrameClassification.register_for_auto_class("AutoModelForAudioFrameClassification")
AaspForPreTraining.register_for_auto_class("AutoModelForPreTraining")
AaspFeatureExtractor.register_for_auto_class("AutoFeatureExtractor")
# transformers 5.4 to 5.22 apply a softmax to every audio classifier's logits: a multi-label checkpoint's scores
# would sum to 1. There, pipeline("audio-classification") builds transformers' class with an AaSP checkpoint's score
# function chosen by problem_type, as 5.23 and later do, and every other model's as transformers chooses it
# (aasp_hf.pipeline_aasp.AaspScoresAudioClassificationPipeline); 5.23 and later are left as they are.
score_audio_classification_by_problem_type()
# pipeline("sound-event-detection", model=folder) for a frame classifier (a task of this package: transformers has none)
register_sound_event_detection()

__all__ = [
    "AaspConfig",
    "AaspFeatureExtractor",
    "AaspModel",
    "AaspModelOutput",
    "AaspPreTrainedModel",
    "AaspForAudioClassification",
    "AaspForAudioFrameClassification",
    "AaspAudioFrameClassifierOutput",
    "AaspForPreTraining",
    "AaspForPreTrainingOutput",
    "AaspAudioClassificationPipeline",
    "AaspSoundEventDetectionPipeline",
]
