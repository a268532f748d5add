#!/usr/bin/env bash
# A stand-in for nvidia-cuda-mps-control in gpu-check's fake mode, where
# there is no MPS: "-f" runs the "daemon" in the foreground, with its
# control file in the pipe directory and a marker in its /dev/shm (which
# MPS clients must share); without it, it answers one command read from
# stdin, as the control client does: get_server_list while the daemon
# runs, and quit.
set -u
pipe=${CUDA_MPS_PIPE_DIRECTORY:?}
log=${CUDA_MPS_LOG_DIRECTORY:?}
if [ "${1:-}" = -f ]; then
	echo $$ >"$pipe/control.pid"
	: >"$pipe/control"
	echo "$pipe" >"/dev/shm/gpushare-fake-mps-$$"
	echo "started $$" >>"$log/control.log"
	while [ ! -e "$pipe/quit" ]; do sleep 0.05; done
	rm -f "$pipe/quit" "$pipe/control" "$pipe/control.pid" "/dev/shm/gpushare-fake-mps-$$"
	echo "quit $$" >>"$log/control.log"
	exit 0
fi
pid=$(cat "$pipe/control.pid" 2>/dev/null) && kill -0 "$pid" 2>/dev/null || {
	echo "no MPS control daemon at $pipe" >&2
	exit 1
}
read -r cmd
case $cmd in
get_server_list) exit 0 ;;
quit)
	: >"$pipe/quit"
	exit 0
	;;
esac
echo "unknown command: $cmd" >&2
exit 1
