#!/usr/bin/env bash
# A stand-in for a CUDA process in gpu-check's fake mode, with the
# protocol of workload.py and workload.cu (see workload_test.go). It
# "allocates" by telling the fake driver ($GPUSHARE_FAKE_GPU_STATE/PID:
# GPU UUID and MiB), and as an MPS client it needs the control daemon in
# its pipe directory and the daemon's /dev/shm, and enforces
# CUDA_MPS_PINNED_DEVICE_MEM_LIMIT itself, as the MPS server would. Under
# the stand-in libvgpu.so (fake-libvgpu.c) it enforces the limit the
# library read, as HAMi-core would. It cannot time compute: there is no
# GPU.
set -u
fatal() {
	printf '{"event":"error","impl":"fake","error":"%s"}\n' "$1"
	exit 1
}
case ${1:-} in
probe)
	echo '{"event":"probe","impl":"fake"}'
	exit 0
	;;
alloc) ;;
work) fatal "the stand-in has no GPU to time compute on" ;;
*) fatal "usage: $0 probe | alloc MIB CHUNK_MIB | work UNITS" ;;
esac
want=$2 chunk=$3
uuid=${CUDA_VISIBLE_DEVICES:-}
uuid=${uuid%%,*}
[ -n "$uuid" ] || fatal "CUDA_VISIBLE_DEVICES names no GPU"
limit= by=
[ -z "${GPUSHARE_FAKE_HAMI_ERROR:-}" ] || fatal "the stand-in libvgpu.so: $GPUSHARE_FAKE_HAMI_ERROR"
if [ -n "${GPUSHARE_FAKE_HAMI_LIMIT_MIB:-}" ]; then
	limit=$GPUSHARE_FAKE_HAMI_LIMIT_MIB
	by="the stand-in libvgpu.so's limit, $limit MiB"
fi
if [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ]; then
	pipe=$CUDA_MPS_PIPE_DIRECTORY
	pid=$(cat "$pipe/control.pid" 2>/dev/null) && [ -e "$pipe/control" ] ||
		fatal "no MPS control daemon in CUDA_MPS_PIPE_DIRECTORY=$pipe"
	[ -e "/dev/shm/gpushare-fake-mps-$pid" ] ||
		fatal "this process's /dev/shm is not the MPS daemon's"
	for entry in ${CUDA_MPS_PINNED_DEVICE_MEM_LIMIT//,/ }; do
		case $entry in
		0=*) v=${entry#0=} ;;
		*=*) continue ;;
		*) v=$entry ;;
		esac
		case $v in
		*[!0-9MG]* | [MG]*) fatal "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: bad value $v" ;;
		*G) limit=$((${v%G} * 1024)) by="the stand-in's MPS limit CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" ;;
		*M) limit=${v%M} by="the stand-in's MPS limit CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" ;;
		*) fatal "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: $v has no unit" ;;
		esac
	done
	case ${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:-100} in
	[1-9] | [1-9][0-9] | 100) ;;
	*) fatal "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: want 1-100" ;;
	esac
fi
state=${GPUSHARE_FAKE_GPU_STATE:?}
got=0 err= oom=false
while [ $((got + chunk)) -le "$want" ]; do
	if [ -n "$limit" ] && [ $((got + chunk)) -gt "$limit" ]; then
		err="out of memory ($by)"
		oom=true
		break
	fi
	got=$((got + chunk))
done
trap 'rm -f "$state/$$"' EXIT
echo "$uuid $got" >"$state/$$"
printf '{"event":"allocated","impl":"fake","allocatedMiB":%d,"allocError":"%s","oom":%s}\n' "$got" "$err" "$oom"
[ -z "$err" ] || exit 0
# "Compute" until stdin closes: one iteration per tenth of a second.
n=0
start=$SECONDS
while :; do
	read -r -t 0.1 _
	rc=$?
	if [ $rc -gt 128 ]; then
		n=$((n + 1))
	elif [ $rc -ne 0 ]; then
		break
	fi
done
printf '{"event":"done","impl":"fake","iterations":%d,"seconds":%d}\n' "$n" $((SECONDS - start))
