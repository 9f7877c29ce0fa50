"""`python -m aasp_hf.tag` and the `aasp-tag` console script: the command lives in `aasp_hf/cli/tag.py`. This
module keeps the documented name."""  # ALIAS-OF-MOVED-MODULE

import sys

from .cli.tag import main

if __name__ == "__main__":
    sys.exit(main())
