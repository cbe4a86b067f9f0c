# tools/nano.mk: `make nano`, included by the Makefile: retrain k3-nano (models/k3-nano) from
# scratch with the exact commands it was trained with, then measure it and write its model card.

# k3-nano: the exact commands models/k3-nano was trained with (tools/train_nano.py, seed 1), then
# the checks of its model card: renderer and tokenizer vs k3chat, PyTorch vs engine logits,
# accuracy on the held-out prompts through k3chat. Seven stages: the first 750 steps of a
# 1800-step schedule; 1800 more steps from that checkpoint on a new schedule and batch order;
# 3000 more from the exported model, 15 % of the conversations with an earlier exchange; 2800
# more weighted toward subtraction, counting and sorting; 2400 more with the subtraction format of
# corpus formats 3; 2000 more with the counting and sorting formats of corpus formats 4; 800
# more at a lower peak, weighted toward sorting. Each stage names the reasoning formats of the
# corpus it was trained on (--formats, tools/nano_corpus.py), so a rerun repeats it exactly.
# Writes $(B)/nano1 to $(B)/nano6 and $(B)/nano, then copies the release files and plots into
# models/k3-nano, and writes the model card from them (tools/nano_card.py; its prose, with the
# analysis of each stage, is tools/nano_card.md).
NANO_1 ?= --steps 1800 --stop-at 750 --batch 16 --lr 3e-3 --kinds KMKM --threads 1 --seed 1 --formats 1
NANO_2 ?= --steps 1800 --batch 16 --lr 2e-3 --batch-seed 2 --eval-every 300 --kinds KMKM --threads 1 --seed 1 --formats 1
NANO_3 ?= --steps 3000 --batch 16 --lr 1e-3 --batch-seed 3 --eval-every 300 --history 0.15 --threads 1 --seed 1 --formats 1
NANO_4 ?= --steps 2800 --batch 16 --lr 1e-3 --batch-seed 5 --eval-every 400 --history 0.15 --threads 1 --seed 1 \
	--weights add=2,sub=6,count=3,reverse=1,compare=2,sort=4,chat=1 --formats 2
NANO_5 ?= --steps 2400 --batch 16 --lr 1e-3 --batch-seed 7 --eval-every 400 --history 0.15 --threads 1 --seed 1 \
	--weights add=2,sub=6,count=3,reverse=1,compare=2,sort=5,chat=1 --formats 3
NANO_6 ?= --steps 2000 --batch 16 --lr 1e-3 --batch-seed 9 --eval-every 400 --history 0.15 --threads 1 --seed 1 \
	--weights add=2,sub=3,count=6,reverse=1,compare=2,sort=7,chat=1 --formats 4
NANO_7 ?= --steps 800 --batch 16 --lr 5e-4 --batch-seed 15 --eval-every 400 --history 0.15 --threads 1 --seed 1 \
	--weights add=2,sub=3,count=2,reverse=1,compare=2,sort=8,chat=1 --formats 4
nano: all
	@sh scripts/deps.sh nano
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 tools/train_nano.py $(NANO_1) $(B)/nano1
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 tools/train_nano.py $(NANO_2) \
		--init $(B)/nano1/checkpoint-750.pt $(B)/nano2
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 tools/train_nano.py $(NANO_3) \
		--init $(B)/nano2 $(B)/nano3
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 tools/train_nano.py $(NANO_4) \
		--init $(B)/nano3 $(B)/nano4
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 tools/train_nano.py $(NANO_5) \
		--init $(B)/nano4 $(B)/nano5
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 tools/train_nano.py $(NANO_6) \
		--init $(B)/nano5 $(B)/nano6
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 tools/train_nano.py $(NANO_7) \
		--init $(B)/nano6 $(B)/nano
	/usr/bin/python3 tools/nano_eval.py render $(B)/nano
	/usr/bin/python3 tools/nano_eval.py logits $(B)/nano --json $(B)/nano/logits.json
	-/usr/bin/python3 tools/nano_eval.py accuracy $(B)/nano --json $(B)/nano/accuracy.json --plot $(B)/nano/accuracy-greedy.png
	/usr/bin/python3 tools/nano_eval.py accuracy $(B)/nano --think off --min-add2 0 --min-other 0 \
		--json $(B)/nano/accuracy-think-off.json
	/usr/bin/python3 tools/nano_eval.py multiturn $(B)/nano --json $(B)/nano/multiturn.json
	mkdir -p models/k3-nano
	cd $(B)/nano && cp config.json generation_config.json model.safetensors tiktoken.model \
		tokenizer_config.json train_log.json loss.png accuracy.png accuracy-greedy.png accuracy.json \
		accuracy-think-off.json multiturn.json logits.json $(CURDIR)/models/k3-nano/
	/usr/bin/python3 tools/nano_card.py models/k3-nano
