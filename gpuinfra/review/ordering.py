"""The integrity rule that needs the stack program's registrations: what waits for what.

A Kubernetes object applied before its namespace, a custom resource before the release whose
chart installs its CRD, or a Helm release before the Secret its values read, fails the first
``pulumi up`` on a new cluster even though each object is valid on its own. The registrations
the stack program makes under the mock runtime carry their dependencies; this rule follows them
(a dependency on a component is one on each of its children) and names every such object.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gpuinfra import chartdata
from gpuinfra.errors import GpuinfraError
from gpuinfra.integrity import CLUSTER_GROUPS, Finding
from gpuinfra.review.stackrun import Resource

RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
SECRET = "kubernetes:core/v1:Secret"


def _kubernetes(resource: Resource) -> tuple[str, str, str] | None:
    """(group, version, kind) of a Kubernetes resource's type token, or None."""
    provider, _, rest = resource.type_.partition(":")
    if provider != "kubernetes" or rest.count(":") != 1:
        return None
    api, kind = rest.split(":")
    group, _, version = api.rpartition("/")
    return group, version, kind


def _metadata(resource: Resource) -> Mapping[str, Any]:
    meta = resource.inputs.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _namespace(resource: Resource) -> str | None:
    if resource.type_ == RELEASE:
        value = resource.inputs.get("namespace")
    else:
        value = _metadata(resource).get("namespace")
    return value if isinstance(value, str) else None


def _label(resource: Resource) -> str:
    kind = (_kubernetes(resource) or ("", "", resource.type_))[2]
    if resource.type_ == RELEASE:
        name = resource.inputs.get("name", resource.name)
    else:
        name = _metadata(resource).get("name", resource.name)
    namespace = _namespace(resource)
    return f"{'Helm release' if resource.type_ == RELEASE else kind} {namespace + '/' if namespace else ''}{name}"


def _reachable(resources: Sequence[Resource]) -> dict[str, set[str]]:
    """Logical name -> every resource it waits for, directly or through others."""
    direct = {r.name: set(r.dependencies) for r in resources}
    children: dict[str, set[str]] = {}
    for r in resources:
        if r.parent is not None:
            children.setdefault(r.parent, set()).add(r.name)
    components = {r.name for r in resources if not r.custom}

    def walk(name: str) -> set[str]:
        found: set[str] = set()
        stack = list(direct.get(name, ()))
        while stack:
            dependency = stack.pop()
            if dependency in found or dependency == name:
                continue
            found.add(dependency)
            stack.extend(direct.get(dependency, ()))
            if dependency in components:
                stack.extend(children.get(dependency, ()))
        return found

    return {r.name: walk(r.name) for r in resources}


def _crd_owners(resources: Sequence[Resource]) -> dict[tuple[str, str], str]:
    """(apiVersion, kind) -> logical name of the release whose chart installs that CRD."""
    owners: dict[tuple[str, str], str] = {}
    for r in resources:
        if r.type_ != RELEASE:
            continue
        chart = str(r.inputs.get("chart", "")).rsplit("/", 1)[-1]
        version = str(r.inputs.get("version", ""))
        try:
            crds = chartdata.load_crds(chart, version)
        except GpuinfraError:
            continue  # a chart without carried data: `versions check` names it
        for api_version, kinds in crds.items():
            for kind in kinds:
                owners[(api_version, kind)] = r.name
    return owners


def _secret_refs(values: Any) -> Iterator[str]:
    """Names of Secrets a release's values read through ``existingSecret``."""
    if isinstance(values, dict):
        for key, value in values.items():
            if key == "existingSecret" and isinstance(value, str) and value:
                yield value
            else:
                yield from _secret_refs(value)
    elif isinstance(values, list):
        for value in values:
            yield from _secret_refs(value)


def check(resources: Sequence[Resource]) -> list[Finding]:
    reach = _reachable(resources)
    namespaces = {_metadata(r).get("name"): r.name for r in resources if r.type_ == NAMESPACE}
    secrets = {
        (_namespace(r), _metadata(r).get("name")): r.name for r in resources if r.type_ == SECRET
    }
    owners = _crd_owners(resources)
    found: list[Finding] = []

    def waits(resource: Resource, target: str, why: str, path: str) -> None:
        if target not in reach[resource.name]:
            found.append(Finding("error", "order", _label(resource), path, why))

    for r in resources:
        typed = _kubernetes(r)
        if typed is None or r.type_ == NAMESPACE:
            continue
        group, version, kind = typed
        namespace = _namespace(r)
        if namespace in namespaces:
            waits(
                r,
                namespaces[namespace],
                f"is applied without waiting for its namespace {namespace}: on a new cluster it "
                "fails with 'namespace not found'; make it depend on the Namespace",
                "dependsOn",
            )
        if group not in CLUSTER_GROUPS:
            api_version = f"{group}/{version}"
            owner = owners.get((api_version, kind))
            if owner is None:
                found.append(
                    Finding(
                        "error",
                        "order",
                        _label(r),
                        "apiVersion",
                        f"no release in this apply installs the CRD of {api_version} {kind}",
                    )
                )
            else:
                waits(
                    r,
                    owner,
                    f"is applied without waiting for {owner}, whose chart installs the CRD of "
                    f"{kind}: on a new cluster the API server does not know the kind yet",
                    "dependsOn",
                )
        if r.type_ == RELEASE:
            for name in sorted(set(_secret_refs(r.inputs.get("values")))):
                key = (namespace, name)
                if key in secrets:
                    waits(
                        r,
                        secrets[key],
                        f"reads the Secret {namespace}/{name} and is installed without waiting "
                        "for it: the release's pods cannot start until it exists",
                        "values",
                    )
    return sorted(found, key=lambda f: (f.object, f.path))
