# -*- coding: utf-8 -*-
# Copyright: gpunode.nvidia contributors
# Apache License 2.0
"""The one way from the controller to the Kubernetes API: the only file that imports `kubernetes` (and its
transport, urllib3).

Every cluster action takes KUBE_OPTIONS (kubeconfig, context: the doc fragment gpunode.nvidia.kubernetes) and
connects with `connect_task`, so the same fault reads the same everywhere:

  library missing       Ansible's missing-library text and the pip line of the controller's Python
  kubeconfig unusable   "cannot load kubeconfig PATH: WHY" (a file that is not there: "the path does not exist")
  API unreachable       "cannot reach the Kubernetes API of kubeconfig PATH (ERROR); ..." (`unreachable`)
  API refusal           the API server's own message (`api_message`)

Objects are changed with `patch_with_version`: read, decide on what was read, write with the read
resourceVersion; a concurrent writer makes the write a 409 Conflict, and the object is read and decided again.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import sys

try:
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.client.rest import ApiException
    # What the client raises when no server answers; the callers catch it from here.
    from urllib3.exceptions import HTTPError as TransportError  # pylint: disable=unused-import
    HAS_KUBERNETES = True
    # The client defines its API classes on first use: CoreV1Api and its models cost about a second of CPU.
    # Ansible loads an action plugin in its main process before it forks a worker per host and task, so naming
    # them here lets every task of a rollout inherit them instead of defining them again.
    API_CLASSES = (k8s.CoreV1Api, k8s.CoordinationV1Api, k8s.PolicyV1Api, k8s.NodeV1Api, k8s.AppsV1Api,
                   k8s.RbacAuthorizationV1Api)
except ImportError:  # reported by require_client with the install line, before any request
    k8s = k8s_config = None

    class ApiException(Exception):
        """Never raised: keeps the except clauses valid without the kubernetes package."""

    class TransportError(Exception):
        """Never raised: keeps the except clauses valid without urllib3."""

    HAS_KUBERNETES = False

# The options of every cluster action (documented by the doc fragment gpunode.nvidia.kubernetes).
KUBE_OPTIONS = dict(
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
)
DEFAULT_KUBECONFIG = "~/.kube/config"


def kube_options(**options):
    """An action's argument spec: KUBE_OPTIONS and the action's own options (which may restate one of them)."""
    spec = dict(KUBE_OPTIONS)
    spec.update(options)
    return spec


class KubeconfigError(Exception):
    """The kubeconfig cannot be loaded; the message names the file and why."""

    def __init__(self, kubeconfig, cause):
        super(KubeconfigError, self).__init__("cannot load kubeconfig %s: %s" % (kubeconfig or "(default)", cause))
        self.cause = cause


def action_fail(msg):
    # Imported here: importing ansible.errors marks the process as Ansible's controller, which the unit
    # tests that import this module beside in-process modules must not do at collection time.
    from ansible.errors import AnsibleActionFail  # pylint: disable=import-outside-toplevel

    return AnsibleActionFail(msg)


def missing_library(reason):
    """Ansible's missing-library text for the kubernetes client, with the line that installs it here."""
    from ansible.module_utils.basic import missing_required_lib  # pylint: disable=import-outside-toplevel

    return "%s Install it on the controller: %s -m pip install kubernetes" % (
        missing_required_lib("kubernetes", reason=reason), sys.executable)


def require_client(reason):
    """Fail the task without the kubernetes package, saying what it was needed for (REASON) and how to install it."""
    if not HAS_KUBERNETES:
        raise action_fail(missing_library(reason))


def missing_kubeconfig(kubeconfig):
    """Why the kubeconfig cannot be read when no file is there, else None (the client would only say "Invalid
    kube-config file. No configuration found.")."""
    if kubeconfig:
        return None if os.path.exists(os.path.expanduser(kubeconfig)) else "the path does not exist"
    # The client's own default: every file of KUBECONFIG (a list), else ~/.kube/config.
    named = os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    paths = [path for path in named.split(os.pathsep) if path]
    if any(os.path.exists(os.path.expanduser(path)) for path in paths):
        return None
    return "%s does not exist (give kubeconfig, or set KUBECONFIG)" % ", ".join(paths)


class Kube(object):
    """One cluster through one connection: the typed APIs every caller uses, and the kubeconfig they came from."""

    def __init__(self, api_client, kubeconfig=None):
        self.api_client = api_client
        self.kubeconfig = kubeconfig
        self.core = k8s.CoreV1Api(api_client)
        self.node_api = k8s.NodeV1Api(api_client)
        self.policy = k8s.PolicyV1Api(api_client)
        self.coordination = k8s.CoordinationV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.rbac = k8s.RbacAuthorizationV1Api(api_client)

    def to_json(self, obj):
        """An API object as the API's JSON (plain dicts, camelCase keys): what the pure decisions take."""
        return self.api_client.sanitize_for_serialization(obj)

    def unreachable(self, exc, stopped, then):
        """The message of a request no server answered: what it left (STOPPED) and what to do THEN."""
        return unreachable(self.kubeconfig, exc, stopped, then)


def connect(kubeconfig=None, context=None, pool_size=4):
    """A Kube from the kubeconfig (None: the client's default), its connection pool big enough for POOL_SIZE
    threads; KubeconfigError when it cannot be loaded."""
    missing = missing_kubeconfig(kubeconfig)
    if missing:
        raise KubeconfigError(kubeconfig, missing)
    configuration = k8s.Configuration()
    try:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration,
                                    persist_config=False)
    except Exception as exc:  # the client raises several types for a bad kubeconfig (ConfigException, YAML, OS)
        raise KubeconfigError(kubeconfig, exc)
    configuration.connection_pool_maxsize = max(pool_size, 4)
    return Kube(k8s.ApiClient(configuration), kubeconfig)


def connect_task(args, reason, pool_size=4):
    """connect() for a task's KUBE_OPTIONS: without the library, or with a kubeconfig that cannot be loaded, the
    task fails with the message."""
    require_client(reason)
    try:
        return connect(args["kubeconfig"], args["context"], pool_size=pool_size)
    except KubeconfigError as exc:
        raise action_fail(str(exc))


def unreachable(kubeconfig, exc, stopped, then):
    return ("cannot reach the Kubernetes API of kubeconfig %s (%s); %s. Check the server address and that it answers "
            "from the controller, then %s" % (kubeconfig or "(default)", exc.__class__.__name__, stopped, then))


def api_message(exc):
    """The API server's own message from an ApiException (its Status body), else the exception."""
    body = getattr(exc, "body", None)
    try:
        return json.loads(body)["message"]
    except (TypeError, ValueError, KeyError):
        return "%s %s" % (getattr(exc, "status", ""), getattr(exc, "reason", None) or exc)


def answer(call, *args, **kwargs):
    """A client call's answer as the API's JSON (plain dicts, camelCase keys), read without the client's models:
    decoding a list of Nodes into models, then back into JSON for the decisions, costs far more controller CPU than
    the request itself (a waiting node of a rollout lists them again and again). Non-2xx answers still raise
    ApiException."""
    return json.loads(call(*args, _preload_content=False, **kwargs).data or b"null")


def patch_with_version(read, decide, write, dry_run, retry_conflict):
    """(outcome, changed): read an object, decide a patch on what was read, write it with the read resourceVersion.

    decide(obj) -> (patch or None, outcome); None writes nothing, and a dry run writes nothing either. A 409 Conflict
    means another writer came between the read and the write: read and decide again while retry_conflict(conflicts)
    is true, else raise that 409. Every other ApiException is the caller's to explain."""
    conflicts = 0
    while True:
        obj = read()
        patch, outcome = decide(obj)
        if patch is None or dry_run:
            return outcome, patch is not None
        patch.setdefault("metadata", {})["resourceVersion"] = obj["metadata"]["resourceVersion"]
        try:
            write(patch)
            return outcome, True
        except ApiException as exc:
            conflicts += 1
            if exc.status != 409 or not retry_conflict(conflicts):
                raise
