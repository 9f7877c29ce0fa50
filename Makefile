# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Both create .venv, install the package with every extra (pyproject.toml) at the versions pinned in constraints.txt
# and ffmpeg when missing, and unpack transformers' own common test mixins from the pinned release's sdist
# (tests/transformers_release.py).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.aasp-installed

.PHONY: setup demo test test-fast test-newest transformers-pr-check bench quality-data study study-quick ffmpeg clean \
	hear-check xares-check mteb-check

setup: $(STAMP) ffmpeg

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all,test]"
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

# The suite without the tests marked `slow` (script processes, launches, torch.compile): under half of `make test`'s
# time, with a fast test of each feature left in (the measured times: docs/testing.md#how-long-it-takes).
test-fast: setup
	$(PY) -m pytest -q -ra -m "not slow" tests

# The transformers-facing tests against the newest releases users would install: a venv of its own (.venv-newest) with
# the package and every extra upgraded to the newest versions the registry offers (no constraints.txt), that
# transformers release's own common test mixins (unpacked into .venv-newest/transformers-tests, which replaces
# pyproject's .venv/transformers-tests on pytest's pythonpath), then the tests. Not part of CI: a new release of a
# dependency must not block a landing. The versions last seen passing are in the README's test section.
# A FutureWarning or DeprecationWarning that our own call into a library triggers fails the test (what the newest
# release deprecates, the next one removes): pytest's module filter matches the module a warning is attributed to,
# the caller of the deprecated function, so the libraries' internal ones are only listed in the warnings summary.
NEWEST_VENV := .venv-newest
NEWEST_PY := $(NEWEST_VENV)/bin/python
NEWEST_MIXINS := $(NEWEST_VENV)/transformers-tests
NEWEST_TESTS := tests/test_transformers_common.py tests/test_transformers_common_pretraining.py \
	tests/test_transformers_mechanisms.py tests/test_offload.py tests/test_no_network.py tests/test_hub_integration.py \
	tests/test_user_path.py tests/test_core_install.py tests/test_feature_extraction.py tests/test_sblu_float32.py
NEWEST_WARNINGS := error::FutureWarning:aasp_hf\nerror::DeprecationWarning:aasp_hf\nerror::PendingDeprecationWarning:aasp_hf

test-newest: ffmpeg
	test -x $(NEWEST_PY) || $(PYTHON) -m venv $(NEWEST_VENV)
	$(NEWEST_PY) -m pip install --quiet --upgrade pip
	$(NEWEST_PY) -m pip install --quiet --upgrade --upgrade-strategy eager -e ".[all,test]"
	$(NEWEST_PY) tests/transformers_release.py --installed --target $(NEWEST_MIXINS)
	@$(NEWEST_PY) -c "import importlib.metadata as m; print('testing with', ', '.join(f'{p} {m.version(p)}' for p in \
		('transformers', 'torch', 'accelerate', 'datasets', 'huggingface_hub', 'safetensors', 'peft', 'onnxruntime')))"
	$(NEWEST_PY) -m pytest -q -ra -o "filterwarnings=$$(printf '$(NEWEST_WARNINGS)')" \
		-o pythonpath="examples conversion benchmarks/quality $(NEWEST_MIXINS)" $(NEWEST_TESTS)

# AaSP written into a transformers source tree as a pull request would add it, then that tree's own checks on it
# (docs/transformers_pr.md): `make transformers-pr-check TRANSFORMERS_SRC=/path/to/transformers` (a git clone).
# Not part of CI. The checks run in a venv of their own (.venv-transformers-pr): the tree installed editable with its
# `quality` extra (ruff and transformers-mlinter at the tree's pins), torch and torchvision (check_repo and the import
# check load every model of the tree), and pytest < 9 with pytest-xdist (the tree's conftest registers its hooks) and
# parameterized for its tests. The tree is moved to a branch `add-aasp` and the written files are committed there.
# Exit code 1 when a check fails; the full output goes to transformers_pr_check.log. PR_ARGS: e.g. --style.
PR_VENV ?= .venv-transformers-pr
PR_PY := $(PR_VENV)/bin/python
PR_PY_ABS = $(abspath $(PR_PY))
PR_TORCHVISION ?= torchvision==0.29.1

transformers-pr-check: setup
	@test -n "$(TRANSFORMERS_SRC)" || { echo "usage: make transformers-pr-check TRANSFORMERS_SRC=DIR, DIR the root of \
	a transformers source tree (git clone https://github.com/huggingface/transformers)"; exit 2; }
	@test -f "$(TRANSFORMERS_SRC)/setup.py" || { echo "TRANSFORMERS_SRC=$(TRANSFORMERS_SRC) holds no setup.py: pass \
	the root of a transformers source tree"; exit 2; }
	test -x $(PR_PY) || $(PYTHON) -m venv $(PR_VENV)
	$(PR_PY) -m pip install --quiet --upgrade pip
	$(PR_PY) -m pip install --quiet "$$(grep '^torch==' constraints.txt)" $(PR_TORCHVISION) \
		-e "$(TRANSFORMERS_SRC)[quality]" "pytest>=7.2.0,<9.0.0" pytest-xdist parameterized accelerate timeout-decorator
	$(PY) conversion/write_transformers_pr.py $(TRANSFORMERS_SRC) --python=$(PR_PY_ABS) $(PR_ARGS)

# ---- make test-compat: every version pyproject.toml declares works -------------------------------------------------
# Besides CI's pins (constraints.txt) and the newest releases (test-newest), two ends of the declared ranges, each in
# a venv of its own installed from a committed, fully resolved set (docs/compatibility.md):
#   lowest     the lowest release of each requirement that pyproject.toml allows (.ci/compat/lowest.txt, resolved
#              from lowest.in by `uv pip compile --resolution lowest-direct`), on Python 3.11;
#   gpu-image  the packages of the GPU machines' image: PyTorch 2.11, transformers 5.17.0, huggingface_hub 1.33.0,
#              NumPy 2.5.2 ... (.ci/compat/gpu-image-constraints.txt), on Python 3.12 as there (NumPy 2.5 needs it).
# Then the grouped tests (transformers-facing, Hub and pipeline, training, data, export; .ci/compat/test_groups.sh)
# against that transformers release's own common test mixins: one PASS/FAIL line per group per set. Not part of CI:
# the first run downloads PyTorch twice with its CUDA libraries (several GB each). `make compat-lock` re-resolves
# the sets (uv, installed into .venv-compat-uv). Name another interpreter with COMPAT_PYTHON.<set>=...
COMPAT_SETS := lowest gpu-image
COMPAT_PYTHON.lowest ?= python3.11
COMPAT_PYTHON.gpu-image ?= python3.12
COMPAT_UV := .venv-compat-uv/bin/uv
COMPAT_PLATFORM := --python-platform x86_64-manylinux_2_28

.PHONY: test-compat compat-lock

.venv-compat-%/.aasp-compat-installed: .ci/compat/%.txt pyproject.toml
	@command -v $(COMPAT_PYTHON.$*) >/dev/null 2>&1 || { echo "the $* set needs $(COMPAT_PYTHON.$*), which is not \
		on PATH: install it, or name one with 'make test-compat COMPAT_PYTHON.$*=/path/to/python'"; exit 2; }
	test -x .venv-compat-$*/bin/python || $(COMPAT_PYTHON.$*) -m venv .venv-compat-$*
	.venv-compat-$*/bin/python -m pip install --quiet --upgrade pip
	.venv-compat-$*/bin/python -m pip install --quiet -r .ci/compat/$*.txt
	.venv-compat-$*/bin/python tests/transformers_release.py --installed --target .venv-compat-$*/transformers-tests
	touch $@

test-compat: ffmpeg $(COMPAT_SETS:%=.venv-compat-%/.aasp-compat-installed)
	bash .ci/compat/test_groups.sh $(COMPAT_SETS)

compat-lock:
	test -x $(COMPAT_UV) || { $(PYTHON) -m venv .venv-compat-uv && .venv-compat-uv/bin/python -m pip install --quiet uv; }
	$(COMPAT_UV) pip compile .ci/compat/lowest.in -c .ci/compat/lowest-constraints.txt --resolution lowest-direct \
		--python-version 3.11 $(COMPAT_PLATFORM) -o .ci/compat/lowest.txt
	$(COMPAT_UV) pip compile .ci/compat/gpu-image.in -c .ci/compat/gpu-image-constraints.txt \
		--python-version 3.12 $(COMPAT_PLATFORM) -o .ci/compat/gpu-image.txt
# ---- end of test-compat ---------------------------------------------------------------------------------------------

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

# HEAR's official tools, unmodified, on an AaSP checkpoint (docs/benchmarks.md): the validator, then heareval's embedding
# and prediction runners on two small synthetic tasks, for the checkpoint and for a log-mel floor without weights.
# heareval 2021.1.3 and hearvalidator 2021.0.2 pin packages older than the project's (PyTorch Lightning 1.x,
# NumPy < 2), so they get a venv of their own (.venv-hear, benchmarks/hear/requirements*.txt); the task builder runs
# in .venv. Without HEAR_MODEL it checks the encoder `make demo` writes (and runs `make demo` when it is missing).
# TensorFlow, which both tools import, sees no GPU: with CUDA_VISIBLE_DEVICES="" torch sees none either, or the
# runner refuses to start. TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1: heareval reloads its own Lightning checkpoints, which
# torch >= 2.6 refuses to unpickle by default.
HEAR_VENV := .venv-hear
HEAR_PY := $(HEAR_VENV)/bin/python
HEAR_STAMP := $(HEAR_VENV)/.hear-installed
HEAR_MODEL ?= demo_output/pretrain/encoder
HEAR_OUT ?= hear_output
HEAR_GRID ?= fast
HEAR_GRID_POINTS ?= 4
HEAR_ENV := TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 CUDA_VISIBLE_DEVICES="" TF_CPP_MIN_LOG_LEVEL=2

$(HEAR_STAMP): benchmarks/hear/requirements.txt benchmarks/hear/requirements-no-deps.txt pyproject.toml
	test -x $(HEAR_PY) || $(PYTHON) -m venv $(HEAR_VENV)
	$(HEAR_PY) -m pip install --quiet -r benchmarks/hear/requirements.txt
	$(HEAR_PY) -m pip install --quiet --no-deps -r benchmarks/hear/requirements-no-deps.txt
	$(HEAR_PY) -m pip install --quiet --no-deps -e .
	touch $(HEAR_STAMP)

hear-check: setup $(HEAR_STAMP)
	@if [ ! -f "$(HEAR_MODEL)/config.json" ]; then \
		if [ "$(HEAR_MODEL)" = "demo_output/pretrain/encoder" ]; then $(MAKE) demo; \
		else echo "HEAR_MODEL=$(HEAR_MODEL) is not a checkpoint folder (no config.json)"; exit 2; fi; fi
	$(HEAR_ENV) $(HEAR_VENV)/bin/hear-validator aasp_hf.hear -m $(HEAR_MODEL)
	$(HEAR_ENV) PYTHONPATH=benchmarks/hear $(HEAR_VENV)/bin/hear-validator logmel_floor
	$(PY) benchmarks/hear/build_tasks.py $(HEAR_OUT)/tasks
	rm -rf $(HEAR_OUT)/embeddings $(HEAR_OUT)/logs && mkdir -p $(HEAR_OUT)/logs
	@echo "heareval's runners: progress in $(HEAR_OUT)/logs/ (a failure prints its last lines)"
	$(HEAR_ENV) $(HEAR_PY) -m heareval.embeddings.runner aasp_hf.hear --model $(HEAR_MODEL) \
		--tasks-dir $(HEAR_OUT)/tasks --embeddings-dir $(HEAR_OUT)/embeddings \
		> $(HEAR_OUT)/logs/embeddings-aasp.log 2>&1 || { tail -n 30 $(HEAR_OUT)/logs/embeddings-aasp.log; exit 1; }
	$(HEAR_ENV) PYTHONPATH=benchmarks/hear $(HEAR_PY) -m heareval.embeddings.runner logmel_floor \
		--tasks-dir $(HEAR_OUT)/tasks --embeddings-dir $(HEAR_OUT)/embeddings \
		> $(HEAR_OUT)/logs/embeddings-floor.log 2>&1 || { tail -n 30 $(HEAR_OUT)/logs/embeddings-floor.log; exit 1; }
	@# the prediction runner writes Lightning's logs under ./logs/: run it in $(HEAR_OUT) so that they land there
	cd $(HEAR_OUT) && $(HEAR_ENV) $(abspath $(HEAR_PY)) -m heareval.predictions.runner embeddings/*/* \
		--grid $(HEAR_GRID) --grid-points $(HEAR_GRID_POINTS) \
		> logs/predictions.log 2>&1 || { tail -n 30 logs/predictions.log; exit 1; }
	$(HEAR_PY) benchmarks/hear/scores.py $(HEAR_OUT)/embeddings

# X-ARES, unmodified (docs/benchmarks.md): X-ARES's own tests of `aasp_hf.integrations.xares` (its check_audio_encoder and its
# runner on tiny tasks), then X-ARES's runner on two small local tasks in its webdataset format
# (benchmarks/xares/build_tasks.py: the HEAR check's clips; a clip-level and a frame-level task) for the checkpoint
# XARES_MODEL and for the log-mel baseline, and the score table. X-ARES gets a venv of its own (.venv-xares, the
# package with its `xares` extra at constraints.txt's pins): it installs a top-level package `tasks`. Its runner runs
# with --max-jobs 0 (one process: with worker processes it assigns tasks to GPUs by `i % device_count()`, which fails
# on a CPU-only machine) and keeps every score and embedding it made under env/ (a second run would reuse the first
# one's), so the tasks are rebuilt on every run. The runners' output goes to $(XARES_OUT)/logs/. Not part of CI: the
# venv installs a second torch (gigabytes), and the whole check takes minutes.
XARES_VENV := .venv-xares
XARES_PY := $(XARES_VENV)/bin/python
XARES_STAMP := $(XARES_VENV)/.xares-installed
XARES_MODEL ?= demo_output/pretrain/encoder
XARES_OUT ?= xares_output
XARES_TASKS := benchmarks.xares.synthetic_scene_task benchmarks.xares.synthetic_event_task
XARES_ENV := CUDA_VISIBLE_DEVICES="" PYTHONPATH=$(CURDIR)

$(XARES_STAMP): pyproject.toml constraints.txt
	test -x $(XARES_PY) || $(PYTHON) -m venv $(XARES_VENV)
	$(XARES_PY) -m pip install --quiet --upgrade pip
	$(XARES_PY) -m pip install --quiet -c constraints.txt -e ".[xares]" pytest
	touch $(XARES_STAMP)

xares-check: setup $(XARES_STAMP)
	@if [ ! -f "$(XARES_MODEL)/config.json" ]; then \
		if [ "$(XARES_MODEL)" = "demo_output/pretrain/encoder" ]; then $(MAKE) demo; \
		else echo "XARES_MODEL=$(XARES_MODEL) is not a checkpoint folder (no config.json)"; exit 2; fi; fi
	$(XARES_ENV) $(XARES_PY) -m pytest -q -p no:cacheprovider tests/test_xares.py
	rm -rf $(XARES_OUT) && mkdir -p $(XARES_OUT)/logs
	$(PY) -m benchmarks.xares.build_tasks $(XARES_OUT)/env
	@echo "X-ARES's runner: progress in $(XARES_OUT)/logs/ (a failure prints its last lines)"
	cd $(XARES_OUT) && $(XARES_ENV) AASP_XARES_MODEL=$(abspath $(XARES_MODEL)) $(abspath $(XARES_PY)) -m xares.run \
		aasp_hf.integrations.xares $(XARES_TASKS) --max-jobs 0 > logs/aasp.log 2>&1 || { tail -n 30 logs/aasp.log; exit 1; }
	cd $(XARES_OUT) && $(XARES_ENV) $(abspath $(XARES_PY)) -m xares.run benchmarks.xares.logmel_encoder $(XARES_TASKS) \
		--max-jobs 0 > logs/logmel.log 2>&1 || { tail -n 30 logs/logmel.log; exit 1; }
	$(PY) benchmarks/xares/scores.py $(XARES_OUT)/env

# MTEB's audio tasks (MAEB), unmodified (docs/benchmarks.md): the tests of `aasp_hf.integrations.mteb` with MTEB installed, then
# MTEB's own evaluation on a small local audio task in its format (benchmarks/mteb/build_task.py: parquet files with
# datasets' Audio column) for the checkpoint MTEB_MODEL and for the log-mel baseline. A venv of its own
# (.venv-mteb, the package with its `mteb` extra at constraints.txt's pins); offline: nothing is fetched. Not part of
# CI, for the same reason as xares-check.
MTEB_VENV := .venv-mteb
MTEB_PY := $(MTEB_VENV)/bin/python
MTEB_STAMP := $(MTEB_VENV)/.mteb-installed
MTEB_MODEL ?= demo_output/pretrain/encoder
MTEB_OUT ?= mteb_output
MTEB_ENV := CUDA_VISIBLE_DEVICES="" HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1

$(MTEB_STAMP): pyproject.toml constraints.txt
	test -x $(MTEB_PY) || $(PYTHON) -m venv $(MTEB_VENV)
	$(MTEB_PY) -m pip install --quiet --upgrade pip
	$(MTEB_PY) -m pip install --quiet -c constraints.txt -e ".[mteb]" pytest
	touch $(MTEB_STAMP)

mteb-check: setup $(MTEB_STAMP)
	@if [ ! -f "$(MTEB_MODEL)/config.json" ]; then \
		if [ "$(MTEB_MODEL)" = "demo_output/pretrain/encoder" ]; then $(MAKE) demo; \
		else echo "MTEB_MODEL=$(MTEB_MODEL) is not a checkpoint folder (no config.json)"; exit 2; fi; fi
	$(MTEB_ENV) $(MTEB_PY) -m pytest -q -p no:cacheprovider tests/test_mteb.py
	rm -rf $(MTEB_OUT) && mkdir -p $(MTEB_OUT)
	$(PY) benchmarks/mteb/build_task.py $(MTEB_OUT)/data
	$(MTEB_ENV) $(MTEB_PY) benchmarks/mteb/run.py $(MTEB_OUT)/data --model $(MTEB_MODEL) \
		--output_folder $(MTEB_OUT)/results 2> $(MTEB_OUT)/run.log || { tail -n 30 $(MTEB_OUT)/run.log; exit 1; }

clean:
	rm -rf $(VENV) demo_output .pytest_cache $(HEAR_VENV) hear_output $(PR_VENV) transformers_pr_check.log \
		$(XARES_VENV) xares_output $(MTEB_VENV) mteb_output

# ---- the GPU machine's image (docs/gpus.md, "The GPU acceptance check") --------------------------------------------
# device-wheels: the wheels of benchmarks/gpu_wheels.txt (what the acceptance check needs beyond that machine's image;
# none today) for CPython 3.12 manylinux x86-64, without their dependencies, into .whl/ (made anew), which a call to the
# machine carries: refused when a name comes in two versions (pip there would stop) or when the wheels and the tracked
# files together pass the 64 MiB a call may carry.
# test-device-image: the rehearsal on this machine's CPU: .venv-device-image holds the image's packages at its versions
# (benchmarks/gpu_image.txt, for this machine's Python; the file says where they differ) and the same wheels for this
# Python, nothing else (no datasets, soundfile, torchcodec, evaluate); aasp_hf comes from PYTHONPATH as it does there.
# It runs the check's --dry_run as the GPU machine's command runs the check, then the tests that need nothing else.
DEVICE_WHEEL_LIST := benchmarks/gpu_wheels.txt
DEVICE_WHEEL_DIR := .whl
DEVICE_CARRY_MIB := 64
DEVICE_PLATFORMS := --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
	--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
DEVICE_WHEELS = $(shell sed -e 's/\#.*//' $(DEVICE_WHEEL_LIST))
DEVICE_VENV := .venv-device-image
DEVICE_PY := $(DEVICE_VENV)/bin/python
DEVICE_STAMP := $(DEVICE_VENV)/.aasp-device-image
# test_plan_measure_finetune is left out: finetune.py reads its downstream data through datasets (not in the image;
# the check does not run it)
DEVICE_TESTS := tests/test_gpu_image.py tests/test_plan_measure.py tests/test_feature_extraction.py \
	--deselect tests/test_plan_measure.py::test_plan_measure_finetune
DEVICE_ENV := PYTHONPATH=$(CURDIR) HF_HUB_OFFLINE=1 OMP_NUM_THREADS=2

.PHONY: device-wheels test-device-image

device-wheels:
	rm -rf $(DEVICE_WHEEL_DIR) && mkdir -p $(DEVICE_WHEEL_DIR)
	@if [ -z "$(strip $(DEVICE_WHEELS))" ]; then \
		echo "device-wheels: $(DEVICE_WHEEL_LIST) lists none (the GPU image holds all the check imports): $(DEVICE_WHEEL_DIR)/ is empty"; \
	else \
		$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
			$(DEVICE_PLATFORMS) -d $(DEVICE_WHEEL_DIR) $(DEVICE_WHEELS) || exit 1; \
	fi
	@twice=$$(ls $(DEVICE_WHEEL_DIR) | grep '\.whl$$' | cut -d- -f1 | tr 'A-Z.-' 'a-z__' | sort | uniq -d); \
	if [ -n "$$twice" ]; then echo "device-wheels: two versions of $$twice in $(DEVICE_WHEEL_DIR)/: keep one"; exit 1; fi
	@wheels=$$(cat $(DEVICE_WHEEL_DIR)/* 2>/dev/null | wc -c); tracked=$$(git ls-files -z | xargs -0 cat 2>/dev/null | wc -c); \
	echo "device-wheels: $$(ls $(DEVICE_WHEEL_DIR) | wc -l) wheel(s), $$wheels bytes; with the tracked files $$((wheels + tracked)) bytes of the $(DEVICE_CARRY_MIB) MiB a call carries"; \
	if [ $$((wheels + tracked)) -gt $$(($(DEVICE_CARRY_MIB) * 1048576)) ]; then \
		echo "device-wheels: over $(DEVICE_CARRY_MIB) MiB: a call to the GPU machine would be refused"; exit 1; fi

$(DEVICE_STAMP): benchmarks/gpu_image.txt $(DEVICE_WHEEL_LIST)
	test -x $(DEVICE_PY) || $(PYTHON) -m venv $(DEVICE_VENV)
	$(DEVICE_PY) -m pip install --quiet -r benchmarks/gpu_image.txt
	$(if $(strip $(DEVICE_WHEELS)),$(DEVICE_PY) -m pip install --quiet --no-deps --only-binary=:all: $(DEVICE_WHEELS))
	touch $(DEVICE_STAMP)

test-device-image: $(DEVICE_STAMP)
	@$(DEVICE_PY) -I -c "import importlib.util as u, sys; there = [m for m in ('datasets', 'soundfile', 'torchcodec', \
		'evaluate', 'aasp_hf') if u.find_spec(m)]; sys.exit(f'$(DEVICE_VENV) holds {there}: not the GPU image') if there else \
		print('$(DEVICE_VENV): no datasets, soundfile, torchcodec, evaluate; aasp_hf from PYTHONPATH')"
	$(DEVICE_ENV) $(DEVICE_PY) benchmarks/gpu_acceptance.py --dry_run
	$(DEVICE_ENV) $(DEVICE_PY) -m pytest -q -ra -p no:cacheprovider $(DEVICE_TESTS)
