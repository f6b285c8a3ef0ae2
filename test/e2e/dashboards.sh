#!/usr/bin/env bash
# The dashboards of the e2e cluster, sourced by build.sh and cluster.sh:
#
#   build_argo_ui        Argo Workflows' own UI (ui/ of the argo-workflows
#                        module at the pinned version), built with yarn and
#                        webpack from the npm registry, cached in
#                        $OUT/argo-ui-<version>/app; build.sh embeds it in
#                        the argo CLI as Argo's Makefile does (ui/dist/app).
#   argo_server_image    the image of `argo server` (the argo CLI).
#   argo_server_up       Argo Server from the module's manifests
#                        (base/argo-server and its cluster RBAC), plain HTTP,
#                        auth modes client and server, NodePort 32746; and a
#                        service account e2e/argo-ui for people who log in
#                        with a token (client mode: the API server sees it).
#   build_tekton_view    the Tekton page (test/e2e/tektonview/web): the
#                        Tekton Dashboard's own components
#                        (@tektoncd/dashboard-components) in a small page of
#                        ours, built with vite from the npm registry, cached
#                        in $OUT/tekton-view-<hash of its sources>/dist.
#   tekton_view_image    its image: test/e2e/tektonview (a Go server that
#                        serves the page and proxies its reads) and the page.
#   tekton_view_up       it in namespace tekton-pipelines, read-only,
#                        NodePort $TEKTON_VIEW_PORT.
#
# The Tekton Dashboard itself is not installed: the Go module proxy refuses
# github.com/tektoncd/dashboard (403 for every version) and npm has only its
# component libraries, so it cannot be built from source here
# (docs/dashboards.md). The page above renders a PipelineRun with the same
# components and the same placeholder rule as the dashboard's own page.

ARGO_UI_PORT="${ARGO_UI_PORT:-32746}"
TEKTON_VIEW_PORT="${TEKTON_VIEW_PORT:-32097}"
TEKTON_VIEW_SRC="${ROOT}/test/e2e/tektonview/web"
YARN_VERSION="${YARN_VERSION:-1.22.22}"
# argo-ui, the component library the UI imports, is pinned upstream to a git
# commit of github.com/argoproj/argo-ui; the npm registry serves it as
# argo-ui 1.0.0, which holds every component the UI imports.
ARGO_UI_LIB_VERSION="${ARGO_UI_LIB_VERSION:-1.0.0}"

# build_argo_ui: $OUT/argo-ui-$ARGO_VERSION/app unless it is there.
build_argo_ui() {
  local dest="${OUT}/argo-ui-${ARGO_VERSION}"
  [ -f "${dest}/app/index.html" ] && return 0
  command -v node >/dev/null 2>&1 || { log "node is not installed: the Argo UI is built with node >= 20"; return 1; }
  local yarn="${OUT}/yarn-${YARN_VERSION}/node_modules/.bin/yarn"
  if [ ! -x "${yarn}" ]; then
    npm install --prefix "${OUT}/yarn-${YARN_VERSION}" --no-audit --no-fund --loglevel=error "yarn@${YARN_VERSION}" >&2
  fi
  local mod; mod="$(go mod download -json "github.com/argoproj/argo-workflows/v3@v${ARGO_VERSION}" | jq -r .Dir)"
  local work; work="$(mktemp -d)"
  # webpack copies ../api/{openapi-spec,jsonschema} into the bundle.
  mkdir -p "${work}/api"
  cp -r "${mod}/ui" "${work}/ui"
  cp -r "${mod}/api/openapi-spec" "${mod}/api/jsonschema" "${work}/api/"
  chmod -R u+w "${work}"
  log "building the Argo UI v${ARGO_VERSION} (yarn install and webpack, a few minutes cold)"
  (
    cd "${work}/ui"
    # The git dependency becomes the registry's argo-ui; yarn resolves it
    # (and only it) anew, every other package stays at its yarn.lock version.
    sed -i "s#\"argo-ui\": \"git+https://github.com/argoproj/argo-ui.git\#[0-9a-f]*\"#\"argo-ui\": \"${ARGO_UI_LIB_VERSION}\"#" package.json
    grep -q "\"argo-ui\": \"${ARGO_UI_LIB_VERSION}\"" package.json || { echo "package.json: no git argo-ui dependency to replace" >&2; exit 1; }
    awk 'BEGIN{skip=0} /^"argo-ui@git\+/{skip=1; next} skip && /^[^ ]/{skip=0} !skip' yarn.lock >yarn.lock.new && mv yarn.lock.new yarn.lock
    sed -i '/frozen-lockfile/d' .yarnrc
    "${yarn}" install --non-interactive --ignore-optional --network-timeout 600000 --silent >&2
    # That argo-ui requires 'uuid/v1', which the UI's uuid 8 no longer
    # exports; Argo's webpack config is used as it is, with that alias and
    # without source maps (nobody debugs the bundle here; it halves the size).
    cat >opr8r-uuid-v1.js <<'JS'
module.exports = require('uuid').v1;
JS
    cat >webpack.opr8r.js <<'JS'
const path = require('path');
const config = require('./webpack.config.js');
config.resolve.alias = Object.assign({}, config.resolve.alias, {'uuid/v1$': path.resolve(__dirname, 'opr8r-uuid-v1.js')});
config.devtool = false;
module.exports = config;
JS
    NODE_ENV=production VERSION="v${ARGO_VERSION}" node_modules/.bin/webpack --mode production --config webpack.opr8r.js --no-stats >&2
    [ -f dist/app/index.html ] || { echo "webpack wrote no dist/app/index.html" >&2; exit 1; }
  ) || { rm -rf "${work}"; return 1; }
  rm -rf "${dest}" && mkdir -p "${dest}" && cp -r "${work}/ui/dist/app" "${dest}/app"
  rm -rf "${work}"
  log "Argo UI v${ARGO_VERSION} built: $(du -sh "${dest}/app" | cut -f1)"
}

# argo_server_image: the argocli image (Argo's own name for it).
argo_server_image() {
  image argocli "quay.io/argoproj/argocli:v${ARGO_VERSION}" -file "${ABIN}/argo:/bin/argo" -entrypoint /bin/argo -user 8737:8737
}

# argo_server_up: Argo Server in namespace argo, its UI on NodePort $ARGO_UI_PORT.
argo_server_up() {
  local mod; mod="$(go mod download -json "github.com/argoproj/argo-workflows/v3@v${ARGO_VERSION}" | jq -r .Dir)"
  local k="${S}/argo-server-kustomize"; rm -rf "${k}"; mkdir -p "${k}"
  cp -r "${mod}/manifests/base/argo-server" "${k}/argo-server"
  cp -r "${mod}/manifests/cluster-install-no-crds/argo-server-rbac" "${k}/argo-server-rbac"
  chmod -R u+w "${k}"
  # Plain HTTP (the browser and `make dev` reach it on the node), and two
  # auth modes: client (a bearer token pasted on the login page: the API
  # server sees that user, whose resume opr8r records) and server (no login,
  # acting as argo-server, for a quick look). No welcome, survey or
  # new-version modals: they cover the page and link to the internet.
  cat >"${k}/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: argo
resources: [argo-server, argo-server-rbac]
images:
- {name: quay.io/argoproj/argocli, newTag: v${ARGO_VERSION}}
patches:
- target: {kind: Deployment, name: argo-server}
  patch: |
    - {op: replace, path: /spec/template/spec/containers/0/args, value: [server, --secure=false, --auth-mode=client, --auth-mode=server]}
    - op: replace
      path: /spec/template/spec/containers/0/env
      value: [{name: FIRST_TIME_USER_MODAL, value: "false"}, {name: FEEDBACK_MODAL, value: "false"}, {name: NEW_VERSION_MODAL, value: "false"}]
    - {op: replace, path: /spec/template/spec/containers/0/readinessProbe/httpGet/scheme, value: HTTP}
    - {op: replace, path: /spec/template/spec/containers/0/readinessProbe/initialDelaySeconds, value: 2}
    - {op: replace, path: /spec/template/spec/containers/0/readinessProbe/periodSeconds, value: 3}
- target: {kind: Service, name: argo-server}
  patch: |
    - {op: add, path: /spec/type, value: NodePort}
    - {op: add, path: /spec/ports/0/nodePort, value: ${ARGO_UI_PORT}}
YAML
  "${KUSTOMIZE}" build "${k}" | kc apply --server-side --force-conflicts -f - >/dev/null
  kc apply -f "${ROOT}/test/e2e/testdata/argo-ui-user.yaml" >/dev/null
}

# argo_ui_url: where the host reaches the UI (kube-proxy's NodePort).
argo_ui_url() { echo "http://127.0.0.1:${ARGO_UI_PORT}"; }

# tekton_view_dir: where the page built from these sources is cached (the
# key is a hash of every source file, package-lock.json among them).
tekton_view_dir() {
  local key
  key="$(cd "${TEKTON_VIEW_SRC}" && find . -type f ! -path './node_modules/*' ! -path './dist/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)"
  echo "${CACHE}/e2e/tekton-view-${key}"
}

# build_tekton_view: the page's dist/ unless it is there. npm ci installs
# exactly package-lock.json's versions from the npm registry.
build_tekton_view() {
  local dest; dest="$(tekton_view_dir)"
  [ -f "${dest}/dist/index.html" ] && return 0
  command -v node >/dev/null 2>&1 || { log "node is not installed: the Tekton page is built with node >= 20.19"; return 1; }
  local work; work="$(mktemp -d)"
  cp -r "${TEKTON_VIEW_SRC}/." "${work}/"
  rm -rf "${work}/node_modules" "${work}/dist"
  log "building the Tekton page (@tektoncd/dashboard-components with vite; about a minute cold)"
  (
    cd "${work}"
    npm ci --no-audit --no-fund --loglevel=error >&2
    node_modules/.bin/vite build --logLevel warn >&2
    [ -f dist/index.html ] || { echo "vite wrote no dist/index.html" >&2; exit 1; }
  ) || { rm -rf "${work}"; return 1; }
  rm -rf "${dest}" && mkdir -p "${dest}" && cp -r "${work}/dist" "${dest}/dist"
  rm -rf "${work}"
  # Builds of earlier sources are of no further use.
  find "${CACHE}/e2e" -maxdepth 1 -name 'tekton-view-*' ! -path "${dest}" -exec rm -rf {} + 2>/dev/null || true
  log "Tekton page built: $(du -sh "${dest}/dist" | cut -f1) in ${dest}"
}

# tekton_view_image: the server and the page in one image.
tekton_view_image() {
  local dist f files=(); dist="$(tekton_view_dir)/dist"
  [ -f "${dist}/index.html" ] || die "the Tekton page is not built (${dist}); test/e2e/build.sh tekton-view builds it"
  while IFS= read -r f; do files+=(-file "${dist}/${f}:/web/${f}"); done < <(cd "${dist}" && find . -type f | sed 's#^\./##' | LC_ALL=C sort)
  image tekton-view "localhost/opr8r/tekton-view:e2e" -file "${ROOT}/bin/e2e/opr8r/tektonview:/tektonview" "${files[@]}" \
    -entrypoint /tektonview -user 65532:65532
}

# tekton_view_up: the page in namespace tekton-pipelines on NodePort $TEKTON_VIEW_PORT.
tekton_view_up() {
  sed "s/nodePort: 32097/nodePort: ${TEKTON_VIEW_PORT}/" "${ROOT}/test/e2e/testdata/tekton-view.yaml" | kc apply -f - >/dev/null
}

# tekton_view_url: where the host reaches the page.
tekton_view_url() { echo "http://127.0.0.1:${TEKTON_VIEW_PORT}"; }
