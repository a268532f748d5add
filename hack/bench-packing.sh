#!/usr/bin/env bash
# Packing benchmark: every policy on the 17 openb workloads of the FGD paper.
# Usage: hack/bench-packing.sh OPENB_DIR [SEEDS] [POLICIES]
# Prints one JSON object per (workload, policy) on stdout; progress on stderr.
set -euo pipefail
openb=${1:?usage: $0 OPENB_DIR [SEEDS] [POLICIES]}
seeds=${2:-42-51}
policies=${3:-random,bestfit,binpack,spread,fgd,fgd-pack,fgd-fill,fgd-robust}
sim=${SIM:-bin/gpushare-sim}
for w in default cpu050 cpu100 cpu200 cpu250 gpushare40 gpushare60 gpushare80 gpushare100 \
	multigpu20 multigpu30 multigpu40 multigpu50 gpuspec10 gpuspec20 gpuspec25 gpuspec33; do
	"$sim" --nodes "$openb/openb_node_list_gpu_node.csv" --pods "$openb/openb_pod_list_$w.csv" \
		--policy "$policies" --seeds "$seeds" --json
done
