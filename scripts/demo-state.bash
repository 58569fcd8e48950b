# The demo's state file, sourced by scripts/demo (and by the tests that start the demo the
# way it does).
#
# The demo server keeps three values from run to run, so that restarting it is invisible to a
# page that is open, and a scrape of its metrics keeps working:
#
#   HELIX_AUTH_SECRET  the session tokens the page holds stay valid (a new secret would
#                      refuse them: "start a new conversation");
#   HELIX_EXECUTOR_ID  DBOS recovers the turns a killed server left parked as soon as the
#                      new one launches (a new id would leave them to the fleet's adoption,
#                      which waits until the old process has been silent for
#                      HELIX_ADOPT_AFTER_SECONDS).
#   HELIX_METRICS_TOKEN the bearer token GET /metrics asks for (without one, a server with
#                      session tokens on refuses every scrape).
#
# The application version needs no keeping: it is the durable contract's version, the same on
# every run of the same code (and turns of an older contract are moved forward).
#
# The file holds KEY=VALUE lines, is created with mode 0600, and is only read, never run.
# Delete it to start over with a new secret and executor id.

# demo_state_file URL: the state file of the database URL: demo.env next to a SQLite file,
# or in the current directory for a Postgres database.
demo_state_file() {
    local url="$1" path
    case "${url}" in
        sqlite*:///*)
            path="${url#*:///}"
            path="${path%%\?*}"
            printf '%s/demo.env\n' "$(dirname -- "${path}")"
            ;;
        *)
            printf 'demo.env\n'
            ;;
    esac
}

# _demo_hex N: N random bytes as 2N hex digits.
_demo_hex() {
    od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'
}

# _demo_workers ARGS...: whether serve's arguments ask for more than one worker process.
_demo_workers() {
    local arg count previous=""
    for arg in "$@"; do
        count=""
        if [[ "${arg}" == --workers=* ]]; then
            count="${arg#--workers=}"
        elif [[ "${previous}" == --workers ]]; then
            count="${arg}"
        fi
        if [[ -n "${count}" && "${count}" != 1 ]]; then
            return 0
        fi
        previous="${arg}"
    done
    return 1
}

# demo_state_use FILE [SERVE_ARGS...]: read FILE, create it (or add what it lacks) with a new
# secret, executor id and metrics token, and export them unless the environment already sets
# them: an explicit HELIX_AUTH_SECRET, HELIX_EXECUTOR_ID or HELIX_METRICS_TOKEN wins, and the
# file keeps its own values.
# With --workers N (N > 1) in SERVE_ARGS the executor id is not exported: each worker
# generates its own.
demo_state_use() {
    local file="$1" secret="" executor="" metrics="" key value
    shift
    if [[ -f "${file}" ]]; then
        while IFS='=' read -r key value || [[ -n "${key}" ]]; do
            case "${key}" in
                HELIX_AUTH_SECRET) secret="${value}" ;;
                HELIX_EXECUTOR_ID) executor="${value}" ;;
                HELIX_METRICS_TOKEN) metrics="${value}" ;;
            esac
        done <"${file}"
    fi
    if [[ -z "${secret}" || -z "${executor}" || -z "${metrics}" ]]; then
        [[ -n "${secret}" ]] || secret="$(_demo_hex 32)"
        [[ -n "${executor}" ]] || executor="demo-$(_demo_hex 6)"
        [[ -n "${metrics}" ]] || metrics="$(_demo_hex 16)"
        # Written whole to a private temporary file, then moved into place.
        (
            umask 077
            {
                echo "# The helix-dbos demo's state, reused by scripts/demo on every run."
                echo "# Delete this file to start over with a new secret and executor id."
                echo "HELIX_AUTH_SECRET=${secret}"
                echo "HELIX_EXECUTOR_ID=${executor}"
                echo "# GET /metrics: curl -H \"Authorization: Bearer \$HELIX_METRICS_TOKEN\" .../metrics"
                echo "HELIX_METRICS_TOKEN=${metrics}"
            } >"${file}.tmp.$$"
        )
        mv -f -- "${file}.tmp.$$" "${file}"
    fi
    chmod 600 -- "${file}"
    export HELIX_AUTH_SECRET="${HELIX_AUTH_SECRET:-${secret}}"
    export HELIX_METRICS_TOKEN="${HELIX_METRICS_TOKEN:-${metrics}}"
    if ! _demo_workers "$@"; then
        export HELIX_EXECUTOR_ID="${HELIX_EXECUTOR_ID:-${executor}}"
    fi
}
