{{/* The security context of gpushare-scheduler and gpushare-extender:
no privileges, no writes to the image. */}}
{{- define "gpushare.restricted" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Scheduling fields of a component's pods: (dict "values" .Values.x). */}}
{{- define "gpushare.placement" -}}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- /* A key set to null drops a default label: helm upgrade --reuse-values
keeps the null rather than dropping the key. */}}
{{- $selector := dict }}
{{- range $k, $x := .values.nodeSelector }}{{ if not (kindIs "invalid" $x) }}{{ $_ := set $selector $k $x }}{{ end }}{{ end }}
{{- with $selector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
