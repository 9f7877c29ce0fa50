# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Both create .venv, install the pinned stack (constraints.txt) and ffmpeg when missing, and unpack transformers'
# own common test mixins from the pinned release's sdist (tests/transformers_release.py).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.aasp-installed

.PHONY: setup demo test test-fast bench quality-data study study-quick ffmpeg clean

setup: $(STAMP) ffmpeg

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -r constraints.txt
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) tests/transformers_release.py
	touch $(STAMP)

# ffmpeg decodes audio files for `datasets` (torchcodec) and the pipeline. Install it when we can.
ffmpeg:
	@if command -v ffmpeg >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = "0" ]; then \
		echo "installing ffmpeg with apt-get"; \
		(apt-get update -qq && apt-get install -y -qq --no-install-recommends ffmpeg >/dev/null) || \
		echo "WARNING: could not install ffmpeg; decoding audio files will fail (install ffmpeg yourself)"; \
	else \
		echo "WARNING: ffmpeg not found. Install it (e.g. 'sudo apt-get install ffmpeg' or 'brew install ffmpeg') to decode audio files."; \
	fi

demo: setup
	$(PY) examples/demo.py

test: setup
	$(PY) -m pytest -q -ra tests

test-fast: setup
	$(PY) -m pytest -q -ra -m "not slow" tests

# Speed/memory ratios against baselines timed in the same run -> benchmarks/speed/results.{json,md}
bench: setup
	$(PY) benchmarks/speed/run.py

# The real-audio mini benchmark from Debian packages (resumable; a finished build is skipped in seconds). Its tools
# are installed with apt-get when missing and we run as root (--no-install-recommends keeps fluid-soundfont-gm out).
quality-data: setup
	@missing=""; for t in fluidsynth timidity festival; do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = "0" ]; then \
		echo "installing$$missing with apt-get"; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	$(PY) benchmarks/quality/build_data.py

# Pre-training quality on the mini benchmark -> benchmarks/quality/results.{md,json,png} (`study-quick`:
# results_quick.*). Resumable: run it again to go on. Hours for `study` (every variant, 2 seeds); ~30 min for
# `study-quick` on 2 idle cores. Extra flags: make study STUDY_ARGS="--variants spe --stop_after_minutes 60"
study: quality-data
	$(PY) benchmarks/quality/run.py $(STUDY_ARGS)

study-quick: quality-data
	$(PY) benchmarks/quality/run.py --quick $(STUDY_ARGS)

clean:
	rm -rf $(VENV) demo_output .pytest_cache
