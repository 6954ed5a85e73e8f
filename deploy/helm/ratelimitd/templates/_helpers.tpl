{{/*
The chart's name, and the name of its objects: the release's name, or
"<release>-ratelimitd" when the release's name does not hold the chart's.
*/}}
{{- define "ratelimitd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ratelimitd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "ratelimitd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ratelimitd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels that select the pods. */}}
{{- define "ratelimitd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ratelimitd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ratelimitd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ratelimitd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image: repository, then the digest or else the tag. */}}
{{- define "ratelimitd.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The ConfigMap of rules the pods mount: the chart's or an existing one. */}}
{{- define "ratelimitd.rulesConfigMap" -}}
{{- .Values.rules.existingConfigMap | default (printf "%s-rules" (include "ratelimitd.fullname" .)) }}
{{- end }}

{{/* The most replicas the Deployment may have, with autoscaling or without. */}}
{{- define "ratelimitd.maxReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.maxReplicas }}{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/*
ratelimitd.validate stops the render, with the reason, on values that
would install something that does not work. values.schema.json checks
each value alone; this checks them together.
*/}}
{{- define "ratelimitd.validate" -}}
{{- $store := .Values.store }}
{{- if and (eq $store.type "memory") (gt (int (include "ratelimitd.maxReplicas" .)) 1) }}
{{- fail (printf "store.type is memory, which counts in each pod alone: %s replicas would each allow the whole limit. Use store.type redis, sentinel or cluster for more than one replica, or set replicaCount to 1 (and autoscaling.enabled to false)." (include "ratelimitd.maxReplicas" .)) }}
{{- end }}
{{- if ne $store.type "memory" }}
{{- if and (not $store.redis.urlSecret.name) (not $store.redis.addresses) }}
{{- fail (printf "store.type is %s: set store.redis.addresses, or store.redis.urlSecret.name (an existing Secret holding the whole Redis URL)" $store.type) }}
{{- end }}
{{- if and (eq $store.type "redis") (gt (len $store.redis.addresses) 1) }}
{{- fail "store.type redis takes one address in store.redis.addresses; for several, use sentinel or cluster" }}
{{- end }}
{{- if and (eq $store.type "sentinel") (not $store.redis.masterName) (not $store.redis.urlSecret.name) }}
{{- fail "store.type sentinel: set store.redis.masterName, the name of the master the Sentinels watch" }}
{{- end }}
{{- end }}
{{- if and .Values.xds.enabled (not .Values.xds.server) }}
{{- fail "xds.enabled: set xds.server (host:port of the xDS management server)" }}
{{- end }}
{{- if and .Values.xds.enabled (not .Values.xds.nodeId) }}
{{- fail "xds.enabled: set xds.nodeId, the node the management server picks the rules by" }}
{{- end }}
{{- if and (not .Values.xds.enabled) (not .Values.rules.existingConfigMap) (not .Values.rules.files) }}
{{- fail "no rules: set rules.files, rules.existingConfigMap, or xds.enabled" }}
{{- end }}
{{- if and .Values.xds.headersSecret.name (not .Values.xds.tls.enabled) (not .Values.xds.insecureHeaders) }}
{{- fail "xds.headersSecret sends its headers (a token) to the management server: turn on xds.tls.enabled, or set xds.insecureHeaders to send them in plaintext" }}
{{- end }}
{{- if and .Values.tls.grpc.clientCA (not .Values.tls.grpc.existingSecret) }}
{{- fail "tls.grpc.clientCA needs tls.grpc.existingSecret (the Secret with tls.crt, tls.key and ca.crt)" }}
{{- end }}
{{- if and .Values.tls.admin.clientCA (not .Values.admin.enabled) }}
{{- fail "tls.admin.clientCA needs admin.enabled: without it the operators' endpoints share the HTTP port, which callers reach without a certificate" }}
{{- end }}
{{- if and .Values.tls.admin.clientCA (not .Values.tls.http.existingSecret) }}
{{- fail "tls.admin.clientCA needs tls.http.existingSecret (the Secret with tls.crt, tls.key and ca.crt; the admin port serves that certificate)" }}
{{- end }}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- $drain := add (include "ratelimitd.seconds" .Values.shutdown.delay) (include "ratelimitd.seconds" .Values.shutdown.timeout) }}
{{- if le $grace (int $drain) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed shutdown.delay plus shutdown.timeout (%d s), or the kubelet kills the drain" $grace (int $drain)) }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" }}
{{- end }}
{{- end }}

{{/*
ratelimitd.seconds turns a duration of whole seconds or minutes ("5s",
"2m", "0") into seconds; values.schema.json lets no other form through.
*/}}
{{- define "ratelimitd.seconds" -}}
{{- $d := toString . }}
{{- if hasSuffix "m" $d }}{{ mul (trimSuffix "m" $d | int) 60 }}
{{- else }}{{ trimSuffix "s" $d | int }}
{{- end }}
{{- end }}

{{/*
ratelimitd.tlsSecret, given (list $ NAME) for NAME grpc, http, redis or
xds, is the existing Secret mounted at /etc/ratelimitd/tls/NAME, or
nothing when that connection has none.
*/}}
{{- define "ratelimitd.tlsSecret" -}}
{{- $ := index . 0 }}
{{- $name := index . 1 }}
{{- $v := $.Values }}
{{- if eq $name "grpc" }}{{ $v.tls.grpc.existingSecret }}
{{- else if eq $name "http" }}{{ $v.tls.http.existingSecret }}
{{- else if and (eq $name "redis") (ne $v.store.type "memory") }}{{ $v.store.redis.tlsSecret }}
{{- else if and (eq $name "xds") $v.xds.enabled $v.xds.tls.enabled }}{{ $v.xds.tls.existingSecret }}
{{- end }}
{{- end }}

{{/*
ratelimitd.redisURL is the --backend URL built from store.redis, with
$(CHART_REDIS_PASSWORD) and $(CHART_REDIS_SENTINEL_PASSWORD) where the
passwords go, for Kubernetes to fill in from the Secrets.
*/}}
{{- define "ratelimitd.redisURL" -}}
{{- $store := .Values.store }}
{{- $r := $store.redis }}
{{- $scheme := ternary "rediss" "redis" $r.tls }}
{{- $password := ternary "$(CHART_REDIS_PASSWORD)" "" (not (empty $r.passwordSecret.name)) }}
{{- $first := first $r.addresses }}
{{- $more := list }}
{{- range rest $r.addresses }}{{ $more = append $more (printf "addr=%s" .) }}{{ end }}
{{- if eq $store.type "sentinel" }}
{{- $userinfo := "" }}
{{- if $r.sentinelPasswordSecret.name }}{{ $userinfo = ":$(CHART_REDIS_SENTINEL_PASSWORD)@" }}{{ end }}
{{- $query := concat $more (list (printf "master_name=%s" $r.masterName)) }}
{{- with $r.username }}{{ $query = append $query (printf "username=%s" .) }}{{ end }}
{{- with $password }}{{ $query = append $query (printf "password=%s" .) }}{{ end }}
{{- printf "%s-sentinel://%s%s/%d?%s" $scheme $userinfo $first (int $r.db) (join "&" $query) }}
{{- else }}
{{- $userinfo := "" }}
{{- if or $r.username $password }}{{ $userinfo = printf "%s:%s@" $r.username $password }}{{ end }}
{{- if eq $store.type "cluster" }}
{{- printf "%s-cluster://%s%s" $scheme $userinfo $first }}{{ with $more }}?{{ join "&" . }}{{ end }}
{{- else }}
{{- printf "%s://%s%s/%d" $scheme $userinfo $first (int $r.db) }}
{{- end }}
{{- end }}
{{- end }}

{{/* ratelimitd.volumes is the pod's volumes, a YAML list, or nothing. */}}
{{- define "ratelimitd.volumes" -}}
{{- if not .Values.xds.enabled }}
- name: rules
  configMap:
    name: {{ include "ratelimitd.rulesConfigMap" . }}
{{- end }}
{{- if .Values.requestLog.enabled }}
- name: request-log
  {{- toYaml .Values.requestLog.volume | nindent 2 }}
{{- end }}
{{- range $name := list "grpc" "http" "redis" "xds" }}
{{- with include "ratelimitd.tlsSecret" (list $ $name) }}
- name: tls-{{ $name }}
  secret:
    secretName: {{ . }}
{{- end }}
{{- end }}
{{- with .Values.admin.tokens.existingSecret }}
- name: admin-tokens
  secret:
    secretName: {{ . }}
    # The token file alone, under a fixed name, readable by the pod's
    # fsGroup (the daemon) only.
    items:
      - key: {{ $.Values.admin.tokens.key }}
        path: tokens
    defaultMode: 0440
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* ratelimitd.volumeMounts is the container's mounts, a YAML list, or nothing. */}}
{{- define "ratelimitd.volumeMounts" -}}
{{- if not .Values.xds.enabled }}
# The whole directory, not a subPath: a subPath never sees the
# ConfigMap's updates.
- name: rules
  mountPath: /etc/ratelimitd/rules
  readOnly: true
{{- end }}
{{- if .Values.requestLog.enabled }}
- name: request-log
  mountPath: /var/log/ratelimitd
{{- end }}
{{- range $name := list "grpc" "http" "redis" "xds" }}
{{- if include "ratelimitd.tlsSecret" (list $ $name) }}
- name: tls-{{ $name }}
  mountPath: /etc/ratelimitd/tls/{{ $name }}
  readOnly: true
{{- end }}
{{- end }}
{{- if .Values.admin.tokens.existingSecret }}
# The directory, not a subPath: the kubelet updates it when the Secret
# changes, and ratelimitd reloads the tokens.
- name: admin-tokens
  mountPath: /etc/ratelimitd/admin-tokens
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}
