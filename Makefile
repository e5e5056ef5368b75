# Two commands do all the set-up on a fresh machine with python3:
#   make demo   fine-tunes the real all-MiniLM-L6-v2 with every CPU recipe on the shipped support-ticket data (offline)
#   make sweep-demo   full_ft and LoRA at tuned learning rates over 3 seeds, with the seed-noise verdict (offline)
#   make label-noise-demo   5-fold cross-validation of noisy demo labels, then the rows label-issues flags (offline)
#   make distill-demo   a teacher on 1,200 tickets teaches students that have 100 labels; export, gate, speed (offline)
#   make test   runs the offline test suite (the default set: not marked slow or gpu)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Offline by default: the demo and the tests never touch the Hugging Face Hub.
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline
# A recipe on the CPU, offline. With OMP_NUM_THREADS unset, accelerate launch gives the run one thread per
# physical core and says so in three lines (no accelerate config key sets it); the demos set that same number
# themselves, and an OMP_NUM_THREADS already in the environment wins. -q: a recipe that stops shows its own
# message (and traceback) once, without the launcher's traceback repeating it (docs/troubleshooting.md).
CPU_LAUNCH = $(OFFLINE) OMP_NUM_THREADS=$${OMP_NUM_THREADS:-$$($(BIN)/python -c \
	'import psutil; print(psutil.cpu_count(logical=False) or 1)')} $(BIN)/accelerate launch -q --config_file accelerate_configs/cpu.yaml
PYTEST_ARGS ?= -m "not slow and not gpu"
# The tests run in two pytest-xdist worker processes, one per core of the 2-core test machine, each taking
# whole files (--dist loadfile: a module's shared fixture, such as a recipe run several tests read, is
# built once, in one worker). `make test PYTEST_PARALLEL=` runs them in this one process instead.
PYTEST_PARALLEL ?= -n 2 --dist loadfile

.PHONY: install demo sweep-demo label-noise-demo long-text-demo task-demo distill-demo test test-all test-slow test-oldest test-latest lint \
	format clean gpu-wheels gpu-rehearsal-venv gpu-rehearsal postgres postgres-stop

# Without a GPU, install PyTorch's CPU build first (a plain `torch` requirement pulls a multi-GB CUDA
# build); with one, pip picks the build that matches the machine. torch is never pinned for GPU users.
# Every other package is held at the versions in constraints.txt, the set the suite last passed on (a
# release of any of them, direct or transitive, cannot break `make test` on a fresh clone: kernels 0.19.1 did).
# `make test-latest` tries the newest of everything and, when the suite passes there, rewrites the file.
CONSTRAINTS ?= constraints.txt

$(BIN)/.installed: setup.cfg pyproject.toml $(CONSTRAINTS)
	# A virtual environment left without pip (an interrupted first run) is rebuilt.
	test -x $(BIN)/pip || $(PYTHON) -m venv --clear $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	if ! command -v nvidia-smi >/dev/null 2>&1 && ! $(BIN)/python -c "import torch" 2>/dev/null; then \
		$(BIN)/python -m pip install --quiet "torch==2.13.0"; \
	fi
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e ".[dev]"
	touch $@

install: $(BIN)/.installed

# Every recipe, in the registry's order (src/recipes_workbench/recipes.py, full_ft first: the others
# are compared with it), all of which run on CPU with the same config; each writes outputs/demo/<recipe>.
# Read when the demo runs, after the install.
DEMO_RECIPES ?= $(shell $(BIN)/python -m recipes_workbench.recipes)

# Each demo ends by writing its figures and the machine (CPU model and flags, GPU, versions, date, git commit)
# to a record, benchmarks/results/<demo>-<UTC time>.json; `python benchmarks/publish.py tables` then puts
# its table wherever a block names it (benchmarks/RESULTS.md), and tests/test_publish.py checks the two agree.
RECORD = $(BIN)/python benchmarks/publish.py record
# The start time and the commit (benchmarks/publish.py start); a record's --started reads both.
STARTED = $(BIN)/python benchmarks/publish.py start

demo: $(BIN)/.installed
	# distill's teacher is the full_ft run just made (the same MiniLM: the demo runs the recipe, it does not shrink the model).
	mkdir -p outputs/demo && $(STARTED) outputs/demo/.started
	for recipe in $(DEMO_RECIPES); do \
		teacher=""; if [ $$recipe = distill ]; then teacher="--teacher outputs/demo/full_ft"; fi; \
		$(CPU_LAUNCH) \
			recipes/$$recipe.py --config recipes/configs/demo.yaml $$teacher || exit 1; \
	done
	# The runs side by side: memory (and what holds it), speed, accuracy; chart in outputs/demo/memory_comparison.png.
	# --wandb: the same table and chart as one comparison run in the demo's W&B group (offline here).
	$(OFFLINE) $(BIN)/python -m recipes_workbench.cli compare --wandb $(addprefix outputs/demo/,$(DEMO_RECIPES))
	$(RECORD) demo $(addprefix outputs/demo/,$(DEMO_RECIPES)) --command "make demo" \
		--started outputs/demo/.started

# A fair comparison in one command (docs/sweeps.md): full_ft and LoRA each over three learning rates on the
# demo data, the best of each repeated over 3 seeds, every trial its own accelerate launch; the report,
# sweep_results.json and sweep_results.png in outputs/sweep_demo/. Rerun after a stop to resume it.
sweep-demo: $(BIN)/.installed
	mkdir -p outputs && $(STARTED) outputs/.sweep_demo_started
	$(OFFLINE) $(BIN)/python -m recipes_workbench.cli sweep recipes/sweeps/sweep_demo.yaml
	$(RECORD) sweep-demo outputs/sweep_demo --command "make sweep-demo" \
		--started outputs/.sweep_demo_started

# Label noise (docs/crossval.md): 10% of the demo's training labels flipped at seed 0, a LABEL_NOISE_FOLDS-fold
# cross-validation of full_ft on the noisy file (1 epoch per fold; the clean validation file is its test split, scored
# by each fold's model and by the folds' ensemble), then label-issues: the flagged rows' precision and recall against
# the flipped ones, in outputs/label_noise/label_noise.json. Rerun after a stop to resume it. LABEL_NOISE_FOLDS=2 is
# quicker. Time on 2 CPU cores: docs/crossval.md.
LABEL_NOISE_FOLDS ?= 5
# Then full_ft trained on the noisy and on the cleaned file once per seed, compared with the sweep's Welch test.
LABEL_NOISE_RETRAIN_SEEDS ?= 0 1 2

label-noise-demo: $(BIN)/.installed
	$(OFFLINE) $(BIN)/python benchmarks/label_noise.py --output_dir outputs/label_noise --folds $(LABEL_NOISE_FOLDS) \
		--retrain_seeds $(LABEL_NOISE_RETRAIN_SEEDS) -- \
		--num_train_epochs 1 --learning_rate 1e-4 --report_to none --disable_tqdm true \
		--test_file data/support_tickets/validation.csv

# Distillation (issue #30, docs/export.md): the teacher is full_ft of all-MiniLM-L6-v2 on all 1,200 training
# tickets (demo.yaml, as in make demo); the student, the same MiniLM, has the first 100 tickets labelled (data/support_tickets_distill/, from data/make_distill_split.py).
# Over DISTILL_SEEDS, the student learns from the 100 labels plus the teacher's logits on the other 1,100
# texts (--transfer_file), and the same student from the 100 labels alone (full_ft), each in 38 steps
# (recipes/configs/distill_demo.yaml). Then the first seed's student is exported with the quality gate
# (int8 weights unsigned: signed int8 fails the gate on MiniLM, docs/export.md; if the gate refuses the int8
# model too, as it did for this student, the fp32 model alone) and timed by
# benchmarks/serving.py (its table in outputs/distill_demo/serving/: times taken on a busy machine are not
# published); the record holds every run's accuracy and the export report.
DISTILL_SEEDS ?= 42 43 44
DISTILL_DIR := outputs/distill_demo
DISTILL_STUDENTS = $(foreach seed,$(DISTILL_SEEDS),$(DISTILL_DIR)/distill_seed$(seed) $(DISTILL_DIR)/labelled_only_seed$(seed))

distill-demo: $(BIN)/.installed
	mkdir -p $(DISTILL_DIR) && $(STARTED) $(DISTILL_DIR)/.started
	$(CPU_LAUNCH) recipes/full_ft.py \
		--config recipes/configs/demo.yaml --output_dir $(DISTILL_DIR)/teacher --report_to none
	for seed in $(DISTILL_SEEDS); do \
		$(CPU_LAUNCH) recipes/distill.py \
			--config recipes/configs/distill_demo.yaml --seed $$seed --output_dir $(DISTILL_DIR)/distill_seed$$seed \
			--teacher $(DISTILL_DIR)/teacher --transfer_file data/support_tickets_distill/transfer.csv || exit 1; \
		$(CPU_LAUNCH) recipes/full_ft.py \
			--config recipes/configs/distill_demo.yaml --seed $$seed --output_dir $(DISTILL_DIR)/labelled_only_seed$$seed || exit 1; \
	done
	# The gate may refuse the int8 model (it did here: benchmarks/RESULTS.md); then the fp32 export alone.
	$(OFFLINE) $(BIN)/python -m recipes_workbench.cli export $(DISTILL_DIR)/distill_seed$(firstword $(DISTILL_SEEDS)) \
		--quantize int8 --int8_weights unsigned \
		|| $(OFFLINE) $(BIN)/python -m recipes_workbench.cli export $(DISTILL_DIR)/distill_seed$(firstword $(DISTILL_SEEDS))
	$(OFFLINE) $(BIN)/python benchmarks/serving.py $(DISTILL_DIR)/distill_seed$(firstword $(DISTILL_SEEDS)) \
		--report_dir $(DISTILL_DIR)/serving --engines pytorch onnx_fp32 \
		$$(test -f $(DISTILL_DIR)/distill_seed$(firstword $(DISTILL_SEEDS))/export/model.int8.onnx && echo onnx_int8)
	$(RECORD) distill-demo $(DISTILL_DIR)/teacher $(DISTILL_STUDENTS) --command "make distill-demo" \
		--wall_s $$(( $$(date +%s) - $$(cat $(DISTILL_DIR)/.started) ))

# Long documents (issue #22): all-MiniLM-L6-v2 on support-ticket threads of 300-470 tokens whose request
# comes at the end (data/long_documents/), at max_seq_length 128 and one epoch for each --long_text mode
# (63 steps; sliding_window 260, over 4,160 windows); outputs/long_documents/<mode>, then the three side by
# side. About 6 min each for truncate and head_tail, 35 min for sliding_window, on 2 busy CPU cores.
LONG_TEXT_MODES ?= truncate head_tail sliding_window

long-text-demo: $(BIN)/.installed
	mkdir -p outputs/long_documents && $(STARTED) outputs/long_documents/.started
	for mode in $(LONG_TEXT_MODES); do \
		$(CPU_LAUNCH) recipes/full_ft.py \
			--config recipes/configs/long_documents.yaml --long_text $$mode \
			--output_dir outputs/long_documents/$$mode || exit 1; \
	done
	$(OFFLINE) $(BIN)/python -m recipes_workbench.cli show $(addprefix outputs/long_documents/,$(LONG_TEXT_MODES))
	$(RECORD) long-text-demo $(addprefix outputs/long_documents/,$(LONG_TEXT_MODES)) --command "make long-text-demo" \
		--started outputs/long_documents/.started

# The multi-label and regression tasks (docs/data-and-tasks.md): full_ft (at 1e-4, see the configs) and LoRA
# on each; outputs/demo_multilabel/<recipe>, outputs/demo_regression/<recipe>, then one record of the four.
task-demo: $(BIN)/.installed
	mkdir -p outputs && $(STARTED) outputs/.task_demo_started
	for task in multilabel regression; do \
		$(CPU_LAUNCH) recipes/full_ft.py \
			--config recipes/configs/demo_$$task.yaml --learning_rate 1e-4 || exit 1; \
		$(CPU_LAUNCH) recipes/lora.py \
			--config recipes/configs/demo_$$task.yaml || exit 1; \
	done
	$(RECORD) task-demo outputs/demo_multilabel/full_ft outputs/demo_multilabel/lora outputs/demo_regression/full_ft \
		outputs/demo_regression/lora --command "make task-demo" \
		--started outputs/.task_demo_started

test: $(BIN)/.installed
	$(OFFLINE) $(BIN)/python -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)

test-all: PYTEST_ARGS = -m "not gpu"
test-all: test

# A local PostgreSQL server for a study shared by several workers (docs/sweeps.md#trials-in-parallel):
# pgserver's binaries from PyPI (the 'postgres' extra, in dev), data in outputs/postgres; prints the URL to
# pass as --storage. tests/workbench/test_parallel.py starts its own. `make postgres-stop` stops it.
postgres: $(BIN)/.installed
	$(BIN)/python tools/postgres_server.py start --data outputs/postgres

postgres-stop: $(BIN)/.installed
	$(BIN)/python tools/postgres_server.py stop --data outputs/postgres

# Only the tests marked slow (CI runs them after `make test`). pytest exits 5 when it selects no test
# (a narrowed PYTEST_ARGS, or no slow test left): nothing failed, so that is not an error here.
SLOW_PYTEST_ARGS ?= -m "slow and not gpu"

test-slow: $(BIN)/.installed
	$(OFFLINE) $(BIN)/python -m pytest $(PYTEST_PARALLEL) $(SLOW_PYTEST_ARGS) || test $$? -eq 5

# The default suite on the oldest supported versions: setup.cfg's lower bounds pinned exactly
# (tools/oldest_requirements.py), in a virtual environment of its own, made afresh each time. torch is
# installed as for `make install` (the CPU build without a GPU) and left as it is by the pins.
OLDEST_VENV ?= .venv-oldest
OLDEST_BIN := $(OLDEST_VENV)/bin

test-oldest:
	$(PYTHON) -m venv --clear $(OLDEST_VENV)
	$(OLDEST_BIN)/python -m pip install --quiet --upgrade pip
	if ! command -v nvidia-smi >/dev/null 2>&1; then \
		$(OLDEST_BIN)/python -m pip install --quiet "torch==2.13.0"; \
	fi
	$(OLDEST_BIN)/python tools/oldest_requirements.py > $(OLDEST_VENV)/oldest-requirements.txt
	# One resolve: the package with its test extras, and every pinned lower bound.
	$(OLDEST_BIN)/python -m pip install --quiet -e ".[test]" -r $(OLDEST_VENV)/oldest-requirements.txt
	$(OLDEST_BIN)/python -m pip list --format=freeze > $(OLDEST_VENV)/installed.txt
	$(OFFLINE) $(OLDEST_BIN)/python -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# The default suite on the newest release of every dependency (transitive ones too: --upgrade-strategy
# eager), in a virtual environment of its own, made afresh each time: what a user installing today gets,
# and the first warning of a release that breaks the recipes (tests/test_trainer_surface.py names the
# private Trainer methods they still need). Without a GPU, torch stays the CPU build installed first
# (the constraint file holds it there: the newest torch from PyPI is a multi-GB CUDA build).
LATEST_VENV ?= .venv-latest
LATEST_BIN := $(LATEST_VENV)/bin

test-latest:
	$(PYTHON) -m venv --clear $(LATEST_VENV)
	$(LATEST_BIN)/python -m pip install --quiet --upgrade pip
	: > $(LATEST_VENV)/constraints.txt
	if ! command -v nvidia-smi >/dev/null 2>&1; then \
		$(LATEST_BIN)/python -m pip install --quiet "torch==2.13.0"; \
		echo "torch==2.13.0" > $(LATEST_VENV)/constraints.txt; \
	fi
	$(LATEST_BIN)/python -m pip install --quiet --upgrade --upgrade-strategy eager \
		-c $(LATEST_VENV)/constraints.txt -e ".[dev]"
	$(LATEST_BIN)/python -m pip list --format=freeze > $(LATEST_VENV)/installed.txt
	# What `make install` installs (the dev extra: the lint tools too), checked as CI checks it.
	$(LATEST_BIN)/ruff check . && $(LATEST_BIN)/ruff format --check . && $(LATEST_BIN)/lint-imports
	$(OFFLINE) $(LATEST_BIN)/python -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)
	# Lint and suite passed on these versions: they become the known-good set `make install` holds to.
	$(LATEST_BIN)/python tools/constraints.py $(LATEST_VENV)/installed.txt > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	@echo "$(CONSTRAINTS) rewritten from $(LATEST_VENV)/installed.txt: review 'git diff $(CONSTRAINTS)' and commit it"

# The GPU check rehearsed on this CPU (issue 34): benchmarks/gpu_check.sh --cpu --tiny, the shell script
# itself, in a virtual environment pinned to the GPU machine's image (benchmarks/gpu_image_requirements.txt:
# Python 3.12, torch 2.11.0, transformers 5.17.0, ...) with the carried wheels of .whl/ installed as there
# (pip --no-index --no-deps --target). Needs PyPI once (about 5 GB: torch 2.11.0 is PyPI's CUDA 13.0 build,
# the image's own, which runs on a CPU). tests/workbench/test_gpu_check.py runs it (slow).
GPU_VENV ?= .venv-gpu
GPU_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12 2>/dev/null))
GPU_REHEARSAL_ARGS ?=
# Named by the requirements' checksum, not dated by them: a fresh clone (CI) reuses a GPU_VENV outside it.
GPU_VENV_STAMP := $(GPU_VENV)/.installed-$(shell cksum < benchmarks/gpu_image_requirements.txt | cut -d' ' -f1)

$(GPU_VENV_STAMP):
	@test -n "$(GPU_PYTHON)" || { echo "No Python 3.12 here (the GPU machine's): set GPU_PYTHON=/path/to/python3.12"; exit 1; }
	$(GPU_PYTHON) -m venv --clear $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install --quiet -r benchmarks/gpu_image_requirements.txt
	$(GPU_VENV)/bin/python -m pip list --format=freeze > $(GPU_VENV)/installed.txt
	touch $@

gpu-rehearsal-venv: $(GPU_VENV_STAMP)

# The wheels a device call carries (carry [".whl"]); also prints their size against the 64 MiB limit.
.whl/.complete: benchmarks/gpu_wheels.sh $(GPU_VENV_STAMP)
	PYTHON=$(GPU_VENV)/bin/python bash benchmarks/gpu_wheels.sh
	touch $@

gpu-wheels: .whl/.complete

gpu-rehearsal: $(GPU_VENV_STAMP) .whl/.complete
	GPU_CHECK_PYTHON=$(GPU_VENV)/bin/python GPU_CHECK_SITE=$(abspath $(GPU_VENV))/carried-site \
		bash benchmarks/gpu_check.sh --cpu --tiny --output $(GPU_VENV)/rehearsal $(GPU_REHEARSAL_ARGS)

# ruff, then the library's import layers (setup.cfg [importlinter]): imports point down, no cycles.
lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(BIN)/.installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf outputs wandb .pytest_cache .ruff_cache
