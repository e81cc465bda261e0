# zbsched: the two entry points of the README.
#
#   make demo   install what is missing, build, run the main job on a default
#   make test   install what is missing, build twice (plain and with
#               AddressSanitizer + UBSan), run the whole suite on both, and a
#               one-minute fuzz run of the schedule loader when clang exists
#
# Everything a fresh Debian 12 machine lacks comes from apt-get (run as root).

DEBS := gcc clang pkg-config meson ninja-build libglpk-dev libcjson-dev \
        libgraphviz-dev check libopenblas-dev libblis-dev libxml2-utils librsvg2-bin \
        libopenmpi-dev openmpi-bin
BUILD := build
ASAN := build-asan
FUZZ := build-fuzz
# nvcc lives outside PATH on the CUDA toolkit's default install.
export PATH := $(PATH):/usr/local/cuda/bin
MESON_FLAGS ?=

.PHONY: all deps demo test test-plain test-asan fuzz clean

all: $(BUILD)/build.ninja
	ninja -C $(BUILD)

deps:
	@missing=$$(for p in $(DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(BUILD)/build.ninja: | deps
	meson setup $(BUILD) $(MESON_FLAGS)

$(ASAN)/build.ninja: | deps
	meson setup $(ASAN) -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled $(MESON_FLAGS)

demo: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)
	./tools/demo.sh $(BUILD)

test: deps test-plain test-asan fuzz
	@./tools/test-summary.sh $(BUILD) $(ASAN)

test-plain: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)
	meson test -C $(BUILD) --print-errorlogs -v --num-processes 2 || true

test-asan: deps $(ASAN)/build.ninja
	ninja -C $(ASAN)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tools/lsan.supp:print_suppressions=0 \
	  meson test -C $(ASAN) --print-errorlogs -v --num-processes 2 || true

fuzz: deps
	@if command -v clang >/dev/null; then \
	  [ -f $(FUZZ)/build.ninja ] || CC=clang meson setup $(FUZZ) -Dfuzz=true -Dtests=false -Dcuda=disabled $(MESON_FLAGS) >/dev/null; \
	  ninja -C $(FUZZ) tests/fuzz/fuzz_sched && ./tools/fuzz.sh $(FUZZ); \
	else echo "fuzz: clang not found, skipped"; fi

clean:
	rm -rf $(BUILD) $(ASAN) $(FUZZ)
