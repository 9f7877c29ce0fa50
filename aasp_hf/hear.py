"""The HEAR 2021 common API under its documented module name (`hear-validator aasp_hf.hear`); it lives in
`aasp_hf/integrations/hear.py`."""  # ALIAS-OF-MOVED-MODULE

from .integrations.hear import (
    get_scene_embeddings,
    get_timestamp_embeddings,
    load_model,
)

__all__ = ["load_model", "get_scene_embeddings", "get_timestamp_embeddings"]
