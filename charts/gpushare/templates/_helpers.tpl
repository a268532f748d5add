{{/* Labels every object of the release carries. */}}
{{- define "gpushare.labels" -}}
app.kubernetes.io/part-of: gpushare
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The label naming one component, beside gpushare.labels: (dict "root" . "component" "node"). */}}
{{- define "gpushare.name" -}}
app.kubernetes.io/name: gpushare-{{ .component }}
{{- end -}}

{{/* Labels that select one component's pods: (dict "root" . "component" "node"). */}}
{{- define "gpushare.selector" -}}
app.kubernetes.io/name: gpushare-{{ .component }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{/* The image of a component: (dict "root" . "component" "node"). */}}
{{- define "gpushare.image" -}}
{{ .root.Values.image.registry }}/gpushare-{{ .component }}:{{ .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end -}}

{{/* GPUShareArgs, as a YAML document. */}}
{{- define "gpushare.args" -}}
apiVersion: config.gpushare.io/v1alpha1
kind: GPUShareArgs
{{ toYaml .Values.gpushare }}
{{- end -}}

{{/* The user name of a component's service account: (dict "root" . "component" "scheduler"). */}}
{{- define "gpushare.user" -}}
system:serviceaccount:{{ .root.Release.Namespace }}:gpushare-{{ .component }}
{{- end -}}

{{/* The namespace the node daemons' leases live in (fixed: gpusharev1.LeaseNamespace). */}}
{{- define "gpushare.leaseNamespace" -}}kube-system{{- end -}}

{{/* Values that cannot work fail the install with a reason. */}}
{{- define "gpushare.validate" -}}
{{- if not (has .Values.mode (list "scheduler" "extender")) -}}
{{- fail (printf "mode: %q is neither scheduler nor extender" .Values.mode) -}}
{{- end -}}
{{- if and (eq .Values.mode "extender") .Values.gpushare.defrag .Values.gpushare.defrag.enabled -}}
{{- fail "gpushare.defrag.enabled: needs mode scheduler (the HTTP extender does not move pods)" -}}
{{- end -}}
{{- if and (eq .Values.mode "extender") .Values.scheduler.replaceDefault -}}
{{- fail "scheduler.replaceDefault: applies to mode scheduler (in extender mode the cluster's kube-scheduler keeps scheduling and calls gpushare-extender)" -}}
{{- end -}}
{{- if and (eq .Values.mode "extender") (ne (int .Values.extender.replicas) 1) -}}
{{- fail "extender.replicas: must be 1 (kube-scheduler's filter and bind calls for a pod must reach the same extender)" -}}
{{- end -}}
{{- if and (eq .Values.mode "scheduler") (gt (int .Values.scheduler.replicas) 1) (not .Values.scheduler.leaderElection.enabled) -}}
{{- fail "scheduler.replicas: more than 1 needs scheduler.leaderElection.enabled (two schedulers would book the same GPUs)" -}}
{{- end -}}
{{- if not (has (toString .Values.hookPolicy.enabled) (list "true" "false" "auto")) -}}
{{- fail (printf "hookPolicy.enabled: %q is not true, false or auto" (toString .Values.hookPolicy.enabled)) -}}
{{- end -}}
{{- if and (eq .Values.mode "scheduler") (not .Values.scheduler.replaceDefault) (empty .Values.scheduler.schedulerNames) -}}
{{- fail "scheduler.schedulerNames: empty, and scheduler.replaceDefault is false: gpushare-scheduler would serve no pod" -}}
{{- end -}}
{{- $names := list -}}
{{- range .Values.node.pools | default list -}}
{{- $name := toString .name -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,47}[a-z0-9])?$" $name) -}}
{{- fail (printf "node.pools: name %q is not a DNS label of at most 49 characters" $name) -}}
{{- end -}}
{{- if has $name $names -}}
{{- fail (printf "node.pools: two pools are named %q" $name) -}}
{{- end -}}
{{- $names = append $names $name -}}
{{- range $k, $_ := . -}}
{{- if or (eq $k "pools") (and (ne $k "name") (not (hasKey $.Values.node $k))) -}}
{{- fail (printf "node.pools[%s]: %q is not a value of node" $name $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range (concat (list .Values.node) (.Values.node.pools | default list)) -}}
{{- $e := .enforcement | default $.Values.node.enforcement -}}
{{- $mps := ternary .mps $.Values.node.mps (hasKey . "mps") -}}
{{- $at := ternary (printf "node.pools[%v]" .name) "node" (hasKey . "name") -}}
{{- if not (has $e (list "none" "mps" "hami-core")) -}}
{{- fail (printf "%s.enforcement: %q is not none, mps or hami-core" $at $e) -}}
{{- end -}}
{{- if and (eq $e "mps") (not $mps) -}}
{{- fail (printf "%s.enforcement: mps needs mps: true (the nodes run MPS to hold containers by it)" $at) -}}
{{- end -}}
{{- end -}}
{{- if and $names .Values.node.affinity -}}
{{- fail "node.affinity: cannot be set with node.pools (gpushare-node's affinity keeps it off the pools' nodes)" -}}
{{- end -}}
{{- if and (eq .Values.mode "scheduler") (not (include "gpushare.kube137" .)) -}}
{{- fail (printf "mode: scheduler needs Kubernetes 1.37 (gpushare-scheduler is kube-scheduler 1.37, and a scheduler may not be newer than its API server), this is %s: use mode=extender" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if and .Values.dra.enabled (not (include "gpushare.kube137" .)) -}}
{{- fail (printf "dra.enabled needs Kubernetes 1.37 (consumable capacity: devices shared by claims), this is %s" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if and (eq (toString .Values.hookPolicy.enabled) "true") (not (include "gpushare.kube136" .)) -}}
{{- fail (printf "hookPolicy.enabled: true needs Kubernetes 1.36 (MutatingAdmissionPolicy v1), this is %s" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- /* One release per cluster: its cluster-wide objects have fixed names.
An install from deploy/ (no release owns it) is adopted with
--take-ownership (docs/install.md, section 4). */ -}}
{{- with lookup "admissionregistration.k8s.io/v1" "ValidatingAdmissionPolicy" "" "gpushare-node" -}}
{{- $a := .metadata.annotations | default dict -}}
{{- $rel := index $a "meta.helm.sh/release-name" | default "" -}}
{{- $ns := index $a "meta.helm.sh/release-namespace" | default "" -}}
{{- if and $rel (or (ne $rel $.Release.Name) (ne $ns $.Release.Namespace)) -}}
{{- fail (printf "gpushare is installed already (release %q in namespace %q): one release serves the cluster; give it more node pools (node.pools) instead" $rel $ns) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
"true" when GPU memory takes the hook route: the GPU hook admission
policies are installed and gpushare-node serves no device per MiB
(--hook-memory). hookPolicy.enabled auto turns it on for a new install
where the API server serves MutatingAdmissionPolicy
(admissionregistration.k8s.io/v1, Kubernetes 1.36; never below 1.36);
an upgrade keeps what the release had (whether its policy exists), as a
node that served MiB devices refuses pods asking for them once it stops.
*/}}
{{- define "gpushare.hooks" -}}
{{- $e := toString .Values.hookPolicy.enabled -}}
{{- if not (include "gpushare.kube136" .) -}}
{{- else if eq $e "auto" -}}
{{- if .Release.IsInstall -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}true{{- end -}}
{{- else if lookup "admissionregistration.k8s.io/v1" "MutatingAdmissionPolicy" "" "gpushare-gpu-hook" -}}true{{- end -}}
{{- else if eq $e "true" -}}true{{- end -}}
{{- end -}}

{{/* "true" where the cluster is Kubernetes 1.36 or later:
MutatingAdmissionPolicy v1. */}}
{{- define "gpushare.kube136" -}}
{{- if semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version -}}true{{- end -}}
{{- end -}}

{{/* "true" where the cluster is Kubernetes 1.37 or later: gpushare-scheduler
(kube-scheduler 1.37). */}}
{{- define "gpushare.kube137" -}}
{{- if semverCompare ">=1.37.0-0" .Capabilities.KubeVersion.Version -}}true{{- end -}}
{{- end -}}

{{/* The profiles gpushare-scheduler serves. */}}
{{- define "gpushare.schedulerProfiles" -}}
{{- $names := .Values.scheduler.schedulerNames -}}
{{- if .Values.scheduler.replaceDefault -}}{{- $names = prepend (without $names "default-scheduler") "default-scheduler" -}}{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/* The users that may write allocation records, as a CEL list: the
service account of the mode's component and allocationPolicy.extraWriters. */}}
{{- define "gpushare.writers" -}}
{{- $writers := list (include "gpushare.user" (dict "root" . "component" .Values.mode)) -}}
{{- $writers = concat .Values.allocationPolicy.extraWriters $writers -}}
{{- toJson $writers -}}
{{- end -}}

{{/* The GPU resource names: the built-in model's and the resourceModel's
own resources, as a JSON list. */}}
{{- define "gpushare.resourceNames" -}}
{{- $names := list "gpushare.io/gpu-mem" "gpushare.io/gpu-core" "gpushare.io/gpu-count" "aliyun.com/gpu-mem" "aliyun.com/gpu-count" "elasticgpu.io/gpu-memory" "elasticgpu.io/gpu-core" "keti.com/mpsgpu" -}}
{{- range (.Values.gpushare.resourceModel | default dict).resources -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- toJson ($names | uniq) -}}
{{- end -}}

{{/* The pod annotations that shape a GPU request (the resourceModel's
modelsAnnotation, mpsComputeAnnotation and mpsMemoryAnnotation, with
resource.Model's defaults, and HAMi's choice of GPU types and UUIDs), as
a JSON list. */}}
{{- define "gpushare.requestAnnotations" -}}
{{- $m := .Values.gpushare.resourceModel | default dict -}}
{{- toJson (list ($m.modelsAnnotation | default "gpushare.io/gpu-models") ($m.mpsComputeAnnotation | default "gpushare.io/mps-compute") ($m.mpsMemoryAnnotation | default "GPUlimits") "nvidia.com/use-gputype" "nvidia.com/nouse-gputype" "nvidia.com/use-gpuuuid" "nvidia.com/nouse-gpuuuid") -}}
{{- end -}}

{{/* The API groups of the GPU resource names, as a YAML flow list. */}}
{{- define "gpushare.resourceGroups" -}}
{{- $groups := list -}}
{{- range (include "gpushare.resourceNames" . | fromJsonArray) -}}
{{- $groups = append $groups (splitList "/" . | first) -}}
{{- end -}}
[{{ $groups | uniq | join ", " }}]
{{- end -}}
