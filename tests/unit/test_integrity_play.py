"""The whole-site check on what the Ansible add-on play resolved (the gpuinfra_site lookup):
the same findings as ``config check --site`` on the same site."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuinfra import addons, integrity, site
from gpuinfra.errors import ConfigError
from tests.conftest import ROOT, example_site_with_full_l4_quota

EXAMPLE = ROOT / "inventory" / "example"


def _as_the_play_resolves(path: Path) -> tuple[addons.AddonsSettings, site.Site]:
    """The site's add-on settings and hosts as the play reads them: the add-on variables of
    group_vars/all (the play's localhost), each host's variables as hostvars give them."""
    loaded = site.load_site(path)
    play = dict(next(iter(loaded.hosts.values())).vars)
    hosts = {name: host.vars for name, host in loaded.hosts.items()}
    return addons.settings_from_play(play), site.resolved_site("mysite", hosts, skip=addons.ADDONS)


def test_a_valid_site_gives_config_checks_warnings(tmp_path: Path) -> None:
    settings, resolved = _as_the_play_resolves(EXAMPLE)
    assert integrity.check_play(settings, resolved, "mysite") == []
    assert integrity.load_checked_site(EXAMPLE).warnings == []
    warned = example_site_with_full_l4_quota(tmp_path)
    settings, resolved = _as_the_play_resolves(warned)
    warnings = integrity.check_play(settings, resolved, "mysite")
    assert warnings
    assert warnings == integrity.load_checked_site(warned).warnings


def test_a_gpu_type_no_host_offers_is_refused_as_config_check_refuses_it(tmp_path: Path) -> None:
    copy = tmp_path / "mysite"
    shutil.copytree(EXAMPLE, copy)
    hosts = copy / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("gpu_type: l4", "gpu_type: a10g"))
    with pytest.raises(ConfigError) as checked:
        integrity.load_checked_site(copy)
    settings, resolved = _as_the_play_resolves(copy)
    with pytest.raises(ConfigError) as played:
        integrity.check_play(settings, resolved, str(copy))
    assert played.value.lines() == checked.value.lines()
    assert any("Deployment triton/triton" in line for line in played.value.lines())


def test_an_inventory_without_hosts_has_no_nodes_to_check_against() -> None:
    # Default settings: the GPU Operator's smoke test asks for a GPU no listed node has.
    empty = site.resolved_site("mysite", {})
    assert integrity.check_play(addons.AddonsSettings(), empty, "mysite") == []
