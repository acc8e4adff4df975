{{/*
The headless Service of a node pool: one DNS record per ready pod, which the router resolves
(discovery.mode dns). Ready means the node's grpc.health.v1 says SERVING, so a draining pod
leaves the records at once. Takes (dict "root" $ "component" "prefill|decode").
*/}}
{{- define "baton.headlessService" -}}
{{- $n := index .root.Values .component -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "baton.headlessName" . }}
  labels:
    {{- include "baton.labels" . | nindent 4 }}
spec:
  clusterIP: None
  publishNotReadyAddresses: false
  selector:
    {{- include "baton.selectorLabels" . | nindent 4 }}
  ports:
    - name: grpc
      port: {{ $n.port }}
      targetPort: grpc
    {{- if .root.Values.metrics.enabled }}
    - name: metrics
      port: {{ .root.Values.metrics.port }}
      targetPort: metrics
    {{- if and (eq .component "decode") .root.Values.proposer.enabled (eq .root.Values.proposer.mode "sidecar") }}
    # The proposer sidecar's /metrics (for the ServiceMonitor). A number, not its name: Services
    # resolve a native sidecar's named ports only from Kubernetes 1.32.
    - name: proposer-metrics
      port: {{ add .root.Values.metrics.port 1 }}
      targetPort: {{ add .root.Values.metrics.port 1 }}
    {{- end }}
    {{- end }}
{{- end -}}
