#!/usr/bin/env bash
# `make test-compat`'s test run: for each set named on the command line (lowest, gpu-image), the grouped tests in
# that set's venv (.venv-compat-<set>, installed from .ci/compat/<set>.txt by the Makefile), with pytest's pythonpath
# pointing at that transformers release's own common test mixins (.venv-compat-<set>/transformers-tests). Prints
# the versions of each set, then one line per group per set: PASS or FAIL and pytest's closing counts. The logs are
# in .venv-compat-<set>/logs/<group>.log. Exits 1 when a group of any set did not pass.
set -u
cd "$(dirname "$0")/../.."

# group name, then the test files: what transformers, the Hub and the pipeline, training, data and export meet
TEST_GROUPS=(
  "transformers:tests/test_transformers_common.py tests/test_transformers_common_pretraining.py tests/test_transformers_mechanisms.py tests/test_modeling.py tests/test_sblu_float32.py tests/test_offload.py"
  "hub-pipeline:tests/test_hub_integration.py tests/test_no_network.py tests/test_user_path.py tests/test_core_install.py tests/test_feature_extraction.py"
  "training:tests/test_pretraining_model.py tests/test_training_step.py tests/test_finetune.py"
  "data:tests/test_data_loaders.py tests/test_data_training.py"
  "export:tests/test_export.py"
)

summary=()
status=0
for set in "$@"; do
  venv=".venv-compat-$set"
  python="$venv/bin/python"
  if [ ! -x "$python" ]; then
    echo "no venv $venv: run 'make test-compat' (it installs it from .ci/compat/$set.txt)"
    exit 2
  fi
  mkdir -p "$venv/logs"
  "$python" -c "import importlib.metadata as m, sys; print('[$set] Python', sys.version.split()[0] + ',', ', '.join(
      f'{p} {m.version(p)}' for p in ('transformers', 'torch', 'torchaudio', 'torchcodec', 'accelerate', 'datasets',
      'huggingface_hub', 'safetensors', 'numpy', 'onnxruntime', 'peft')))"
  for entry in "${TEST_GROUPS[@]}"; do
    group="${entry%%:*}"
    files="${entry#*:}"
    log="$venv/logs/$group.log"
    start=$(date +%s)
    # shellcheck disable=SC2086  # the file list is split on purpose
    "$python" -m pytest -q -ra -p no:cacheprovider \
      -o pythonpath="examples conversion benchmarks/quality $venv/transformers-tests" $files >"$log" 2>&1
    code=$?
    seconds=$(( $(date +%s) - start ))
    counts=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped)' "$log" | tail -n 1 | sed -E 's/^=+ //; s/ =+$//')
    if [ "$code" -eq 0 ]; then verdict=PASS; else verdict=FAIL; status=1; fi
    line="$set $group: $verdict (${counts:-no pytest summary, exit $code}; ${seconds} s) $log"
    echo "$line"
    summary+=("$line")
  done
done
echo
echo "test-compat summary:"
printf '  %s\n' "${summary[@]}"
exit "$status"
