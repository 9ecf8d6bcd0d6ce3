# The README's two commands: `make train` and `make test`. Both run the set-up script,
# which installs what is missing and builds build/forge in Release.
SHELL := /bin/bash
FORGE := build/forge
CONFIG ?= configs/small.json

.PHONY: setup build train test data data-gpt2 clean format

setup:
	@scripts/setup.sh

build: setup

data/fortunes/train.bin: | setup
	$(FORGE) data prepare --tokenizer bytes --out data/fortunes /usr/share/games/fortunes

data: setup data/fortunes/train.bin

# The fortunes corpus in GPT-2 tokens, for configs/gpt2-124m.json.
data-gpt2: setup
	$(FORGE) data prepare --tokenizer gpt2 --out data/fortunes-gpt2 /usr/share/games/fortunes

train: setup data
	@scripts/train_default.sh $(CONFIG)

test: setup
	cd build && ctest --output-on-failure -j1 --timeout 1500

format:
	clang-format -i $$(scripts/cxx_sources.sh)

clean:
	rm -rf build
