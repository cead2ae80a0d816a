{{/* The chart's name, or nameOverride. */}}
{{- define "webhook-dedup.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release's, with the chart's unless it already holds it. */}}
{{- define "webhook-dedup.fullname" -}}
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

{{- define "webhook-dedup.selectorLabels" -}}
app.kubernetes.io/name: {{ include "webhook-dedup.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "webhook-dedup.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "webhook-dedup.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
webhook-dedup.secrets: the signing-secret variables the routes read, one
per line. A preset's is <PRESET>_WEBHOOK_SECRET (standardwebhooks and its
alias svix: STANDARD_WEBHOOKS_SECRET); header:, json: and auto sources read
none; a route's secret overrides the name, "" meaning none.
*/}}
{{- define "webhook-dedup.secrets" -}}
{{- $names := list }}
{{- range .routes }}
{{- $name := "" }}
{{- if hasKey . "secret" }}
{{- $name = .secret }}
{{- else if or (contains ":" .source) (contains "+" .source) (eq .source "auto") }}
{{- else if has .source (list "standardwebhooks" "svix") }}
{{- $name = "STANDARD_WEBHOOKS_SECRET" }}
{{- else }}
{{- $name = printf "%s_WEBHOOK_SECRET" (.source | upper | replace "-" "_") }}
{{- end }}
{{- if $name }}
{{- $names = append $names $name }}
{{- end }}
{{- end }}
{{- $names | uniq | join "\n" }}
{{- end }}

{{/*
webhook-dedup.validate fails the render on what values.schema.json cannot
say: a combination that would deduplicate nothing or start unverified.
Takes the chart's context.
*/}}
{{- define "webhook-dedup.validate" -}}
{{- $v := .Values }}
{{- if not $v.upstream.url }}
{{- fail "upstream.url is required: the app webhook-dedup forwards to (http://my-app.my-namespace.svc:8080; as a sidecar, http://127.0.0.1:PORT)" }}
{{- end }}
{{- if and (gt (int $v.replicaCount) 1) (has $v.store.type (list "memory" "dataDir")) }}
{{- fail (printf "replicaCount %d with store.type %s: each replica would deduplicate alone; use store.type redis or postgres, or one replica" (int $v.replicaCount) $v.store.type) }}
{{- end }}
{{- if and (include "webhook-dedup.secrets" $v) (not $v.existingSecret) }}
{{- fail (printf "existingSecret is empty, but the routes read %s: name the Secret that holds them" (include "webhook-dedup.secrets" $v | splitList "\n" | join ", ")) }}
{{- end }}
{{- $async := eq $v.delivery "async" }}
{{- range $v.routes }}{{ if eq (default "" .delivery) "async" }}{{ $async = true }}{{ end }}{{ end }}
{{- if and $async (eq $v.store.type "memory") }}
{{- fail "async delivery needs a store that keeps the request: store.type dataDir, redis or postgres" }}
{{- end }}
{{- end }}

{{/*
webhook-dedup.sidecar renders the webhook-dedup container, for this chart's
Deployment and for charts that embed it in their own pods:

  initContainers:
    {{- include "webhook-dedup.sidecar" (dict "ctx" (index .Subcharts "webhook-dedup") "native" true) | nindent 4 }}

ctx: this chart's context. native: true for an init container with
restartPolicy Always (Kubernetes >= 1.29), started before the app and
stopped after it. The pod must carry the label appNameLabel names, and, for
store.type dataDir, a volume named webhook-dedup-data.
*/}}
{{- define "webhook-dedup.sidecar" -}}
{{- $ctx := .ctx }}
{{- $v := $ctx.Values }}
{{- include "webhook-dedup.validate" $ctx -}}
- name: webhook-dedup
  image: "{{ $v.image.repository }}:{{ default $ctx.Chart.AppVersion $v.image.tag }}"
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if .native }}
  restartPolicy: Always
  {{- end }}
  ports:
    - name: webhooks
      containerPort: 8080
    - name: admin
      containerPort: 9090
  {{- with $v.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  env:
    # The deployment's identity, kept with its records: a webhook-dedup that
    # finds its KEY_PREFIX owned by another APP_NAME refuses to start.
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: POD_APP
      valueFrom:
        fieldRef:
          fieldPath: metadata.labels['{{ $v.appNameLabel }}']
    - name: APP_NAME
      value: $(POD_NAMESPACE)/$(POD_APP)
    - name: UPSTREAM_URL
      value: {{ $v.upstream.url | quote }}
    - name: UPSTREAM_TIMEOUT
      value: {{ $v.upstream.timeout | quote }}
    - name: LISTEN_ADDR
      value: ":8080"
    - name: ADMIN_ADDR
      value: ":9090"
    {{- with $v.routes }}
    - name: ROUTES
      value: {{ $routes := list }}{{ range . }}{{ $r := printf "%s=%s" .path .source }}{{ if .delivery }}{{ $r = printf "%s;%s" $r .delivery }}{{ end }}{{ $routes = append $routes $r }}{{ end }}{{ join "," $routes | quote }}
    {{- end }}
    - name: DELIVERY
      value: {{ $v.delivery | quote }}
    - name: SHADOW_MODE
      value: {{ $v.shadowMode | quote }}
    - name: ON_STORE_ERROR
      value: {{ $v.onStoreError | quote }}
    - name: SHUTDOWN_DELAY
      value: {{ $v.shutdown.delay | quote }}
    - name: SHUTDOWN_TIMEOUT
      value: {{ $v.shutdown.timeout | quote }}
    - name: LOG_LEVEL
      value: {{ $v.logLevel | quote }}
    {{- if eq $v.store.type "dataDir" }}
    - name: DATA_DIR
      value: {{ $v.store.dataDir.path | quote }}
    {{- else if and (eq $v.store.type "redis") $v.store.redis.url }}
    - name: REDIS_URL
      value: {{ $v.store.redis.url | quote }}
    {{- else if has $v.store.type (list "redis" "postgres") }}
    {{- $s := index $v.store $v.store.type }}
    - name: {{ ternary "REDIS_URL" "DATABASE_URL" (eq $v.store.type "redis") }}
      valueFrom:
        secretKeyRef:
          name: {{ default $v.existingSecret $s.existingSecret | required "store: name the Secret that holds the store's URL (store.*.existingSecret or existingSecret)" }}
          key: {{ $s.key }}
          optional: false
    {{- end }}
    {{- range (include "webhook-dedup.secrets" $v | splitList "\n" | compact) }}
    # Required: without its Secret the pod waits rather than start without
    # verifying signatures.
    - name: {{ . }}
      valueFrom:
        secretKeyRef:
          name: {{ $v.existingSecret }}
          key: {{ . }}
          optional: false
    {{- end }}
    # The Go runtime collects garbage harder as the heap nears the limit,
    # instead of being OOM-killed with garbage still around.
    {{- if dig "limits" "memory" "" $v.resources }}
    - name: GOMEMLIMIT
      valueFrom:
        resourceFieldRef:
          resource: limits.memory
    {{- end }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  startupProbe:
    httpGet:
      path: /healthz
      port: admin
    {{- toYaml $v.probes.startup | nindent 4 }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: admin
    {{- toYaml $v.probes.liveness | nindent 4 }}
  readinessProbe:
    # 503 while the store is unreachable, and at once after SIGTERM.
    httpGet:
      path: /readyz
      port: admin
    {{- toYaml $v.probes.readiness | nindent 4 }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  # Pod Security Standards "restricted".
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
  {{- if eq $v.store.type "dataDir" }}
  volumeMounts:
    - name: webhook-dedup-data
      mountPath: {{ $v.store.dataDir.path }}
  {{- end }}
{{- end }}
