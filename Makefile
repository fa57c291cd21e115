# gpumem: the two commands a fresh machine needs are `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_BUNDLE ?= examples/runbook-incident
## pytest-xdist workers for `make test` and `make test-fast` (auto: one per core; 0: in this process).
## A file's tests stay on one worker (--dist loadfile), so a module's Prometheus starts once.
TEST_WORKERS ?= auto
PYTEST_PAR := -n $(TEST_WORKERS) --dist loadfile
## `make test-fast`: two workers per core; half its time is tests waiting on a process, a drain or a
## deadline, and the other workers fill it (docs/benchmarks.md has the timings)
FAST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) * 2 )))

.PHONY: demo test test-fast lint bench sanitize clean system-deps

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,charts]'
	$(BIN)/python -m compileall -q bot collectors runbooks  # bytecode, as a non-editable install leaves it
	touch $(STAMP)

## Set up and run a real triage on the bundled runbook incident (exit 1 = a cause was found).
demo: $(STAMP)
	@$(BIN)/gpumem triage --bundle $(DEMO_BUNDLE) --lang $${GPUMEM_LANG:-en}; rc=$$?; [ $$rc -le 1 ]

## Set up and run everything CI runs: lint, layer contracts, the whole test suite.
test: $(STAMP) system-deps lint
	$(BIN)/pytest $(PYTEST_PAR)

## The developer loop: lint, then the suite without the real Prometheus and Alertmanager and
## with at most 10 examples per hypothesis test (tests/support/fast.py). CI runs `make test`.
test-fast: $(STAMP) lint
	$(BIN)/pytest --fast -q -n $(FAST_WORKERS) --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check bot collectors runbooks tests benchmarks
	$(BIN)/lint-imports

bench: $(STAMP) system-deps
	$(BIN)/python -m benchmarks.run

## The compiled access-log scanner under AddressSanitizer and UBSan, on its differential fuzz
## tests and the shape tests (gcc; the normal build is put back afterwards, pass or fail).
sanitize: $(STAMP)
	@so=$$($(BIN)/python -c 'import collectors.access_logs._access_native as m; print(m.__file__)'); \
	inc=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	cp "$$so" "$$so.release" && \
	gcc -shared -fPIC -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -I"$$inc" \
	  collectors/access_logs/_access_native.c -o "$$so" && \
	PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  $(BIN)/pytest -q -p no:cacheprovider tests/test_access_log_native.py tests/test_access_log_shapes.py tests/test_access_log_fast.py; \
	rc=$$?; mv "$$so.release" "$$so"; exit $$rc

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

## Debian packages for `make test`: a real Prometheus server (prometheus, promtool), a real
## Alertmanager (prometheus-alertmanager, amtool: the webhook tests, and the receiver in
## deploy/components/alerts) and a CJK font for Chinese charts; mawk for `make bench`'s
## comparison. Idempotent: installs only what is missing; needs root (or sudo) then. The
## prometheus packages' postinst scripts start their services; a policy-rc.d guard keeps them
## from doing so. kubectl (its built-in kustomize), where installed, is compared with
## tests/support/kustomize.py.
system-deps:
	@missing=""; \
	{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || missing="$$missing prometheus"; \
	{ command -v prometheus-alertmanager && command -v amtool; } >/dev/null 2>&1 || missing="$$missing prometheus-alertmanager"; \
	command -v mawk >/dev/null 2>&1 || missing="$$missing mawk"; \
	dpkg-query -W -f='$${Status}\n' fonts-wqy-microhei fonts-noto-cjk 2>/dev/null | grep -q ' installed$$' || missing="$$missing fonts-wqy-microhei"; \
	[ -z "$$missing" ] && exit 0; \
	sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
	echo "installing Debian packages:$$missing"; \
	guard=""; if [ ! -e /usr/sbin/policy-rc.d ]; then \
	  printf '#!/bin/sh\nexit 101\n' | $$sudo tee /usr/sbin/policy-rc.d >/dev/null && $$sudo chmod 755 /usr/sbin/policy-rc.d && guard=1; fi; \
	$$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; rc=$$?; \
	[ -z "$$guard" ] || $$sudo rm -f /usr/sbin/policy-rc.d; \
	exit $$rc
