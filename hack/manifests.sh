#!/usr/bin/env bash
# Renders deploy/'s RBAC and admission policies from charts/gpushare, for
# clusters installed without Helm (in kube-system, with the names the
# chart gives, for Kubernetes 1.37). The chart is the source: edit it, then run
# `make manifests`; chart-test fails when the two differ.
# Usage: HELM=helm hack/manifests.sh DIR
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: hack/manifests.sh DIR}
helm=${HELM:-helm}
mkdir -p "$out"

# render FILE TEMPLATE [--set ...]: one template of the chart, in kube-system.
render() {
	local file=$1 template=$2
	shift 2
	{
		echo "# Generated from charts/gpushare/templates/$template by \`make manifests\`:"
		echo "# edit the chart, not this file."
		"$helm" template gpushare "$root/charts/gpushare" --namespace kube-system --kube-version 1.37 \
			--show-only "templates/$template" "$@" | sed -e '1{/^---$/d}' -e '/^# Source: /d'
	} >"$out/$file.tmp"
	mv "$out/$file.tmp" "$out/$file"
}

render node-rbac.yaml node-rbac.yaml
# gpushare-dra's (dra.enabled): its slices, and the DeviceClass of its devices.
render node-dra-rbac.yaml node-dra-rbac.yaml --set dra.enabled=true
render dra-deviceclass.yaml dra-deviceclass.yaml --set dra.enabled=true
render scheduler-rbac.yaml scheduler-rbac.yaml
render extender-rbac.yaml extender-rbac.yaml --set mode=extender
render gpu-hook-policy.yaml gpu-hook-policy.yaml --set hookPolicy.enabled=true
# GPU quotas (quota.enabled): gpushare-webhook's RBAC, and the webhook with
# a Secret of the operator's own (the chart makes one; here caBundle is
# to be filled in).
render webhook-rbac.yaml quota-webhook-rbac.yaml --set quota.enabled=true
render quota-webhook.yaml quota-webhook.yaml --set quota.enabled=true \
	--set quota.tls.secretName=gpushare-webhook-tls --set quota.tls.caBundle=CA_BUNDLE_BASE64
# Every way in at once: gpushare-scheduler with kubeadm's scheduler.conf
# (system:kube-scheduler), or either component as its service account.
render allocation-policy.yaml allocation-policy.yaml \
	--set 'allocationPolicy.extraWriters={system:kube-scheduler,system:serviceaccount:kube-system:gpushare-extender}'
# The dashboard and the alerts: for Grafana's sidecar and the Prometheus
# Operator, and as plain files to import into Grafana or list in a
# Prometheus's rule_files.
render grafana-dashboard.yaml dashboard.yaml --set grafana.dashboard.enabled=true
render prometheus-rule.yaml prometheusrule.yaml --set prometheusRule.enabled=true
cp "$root/charts/gpushare/files/dashboard.json" "$out/gpushare-dashboard.json"
cp "$root/charts/gpushare/files/alerts.yaml" "$out/gpushare-alerts.yaml"
