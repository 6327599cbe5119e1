"""Graphs and gossip matrices: double stochasticity, support, computed sigma_2 and diameter, bad inputs."""

import numpy as np
import pytest

from optimization.fedftrl.networks import (
    build_network,
    check_gossip,
    complete_graph,
    diameter,
    fastest_mixing_gossip,
    grid_graph,
    make_graph,
    make_network,
    max_degree_gossip,
    metropolis_gossip,
    ring_graph,
    sigma2,
)


@pytest.mark.parametrize("topology", ["complete", "ring", "grid", "rgg"])
@pytest.mark.parametrize("rule", ["max_degree", "metropolis", "fastest"])
def test_gossip_is_doubly_stochastic_on_the_graph(topology, rule):
    net = make_network(topology, 16, rule=rule)
    P, A = net.P, net.adjacency
    np.testing.assert_allclose(P.sum(0), 1, atol=1e-12)
    np.testing.assert_allclose(P.sum(1), 1, atol=1e-12)
    np.testing.assert_allclose(P, P.T, atol=1e-15)
    assert P.min() >= 0
    assert np.all(P[~A & ~np.eye(16, dtype=bool)] == 0)
    assert 0 <= net.sigma2 < 1
    # P^n converges to the averaging matrix at rate sigma_2^n
    n = 30
    err = np.abs(np.linalg.matrix_power(P, n) - 1 / 16).max()
    assert err <= net.sigma2**n * 16 + 1e-12


def test_known_spectra_and_diameters():
    V = 16
    assert diameter(complete_graph(V)) == 1
    assert diameter(ring_graph(V)) == V // 2
    assert diameter(grid_graph(V)) == 2 * (4 - 1)
    assert sigma2(max_degree_gossip(complete_graph(V))) == pytest.approx(0.0, abs=1e-12)
    # ring, max-degree rule: P = I - Lap / 3, eigenvalues 1 - (2 - 2 cos(2 pi k / V)) / 3
    eig = 1 - (2 - 2 * np.cos(2 * np.pi * np.arange(1, V) / V)) / 3
    assert sigma2(max_degree_gossip(ring_graph(V))) == pytest.approx(np.abs(eig).max(), rel=1e-12)
    # grid: the max-degree rule on the 4 x 4 lattice (d_max = 4): hand-checked corner row
    P = max_degree_gossip(grid_graph(V))
    assert P[0, 0] == pytest.approx(1 - 2 / 5) and P[0, 1] == pytest.approx(1 / 5) and P[0, 4] == pytest.approx(1 / 5)
    # the topology delay follows C = min(log(V t), sqrt V) / (1 - sigma2) + 2 + D
    net = make_network("ring", V)
    assert net.delay(1.0) == pytest.approx(np.log(V) / (1 - net.sigma2) + 2 + V // 2)


def test_metropolis_weights_hand_checked():
    A = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], bool)      # a path: degrees 1, 2, 1
    P = metropolis_gossip(A)
    np.testing.assert_allclose(P, [[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 3, 2 / 3]])


def _slem(P):
    """max(lambda_2, -lambda_n) from the eigenvalues; also checks that the SVD's sigma_2 is the same number."""
    lam = np.linalg.eigvalsh(P)
    slem = max(lam[-2], -lam[0])
    assert sigma2(P) == pytest.approx(slem, abs=1e-10)
    return slem


def test_fastest_mixing_complete_graph_is_uniform_averaging():
    V = 8
    P = fastest_mixing_gossip(complete_graph(V))
    assert _slem(P) < 1e-3
    np.testing.assert_allclose(P, np.full((V, V), 1 / V), atol=1e-3)


@pytest.mark.parametrize("n", [6, 10])
def test_fastest_mixing_path_matches_closed_form(n):
    # Boyd, Diaconis & Xiao 2004: on a path every edge gets 1/2, SLEM cos(pi / n)
    A = np.zeros((n, n), bool)
    k = np.arange(n - 1)
    A[k, k + 1] = A[k + 1, k] = True
    assert _slem(fastest_mixing_gossip(A)) == pytest.approx(np.cos(np.pi / n), abs=1e-3)


@pytest.mark.parametrize("n", [8, 12])
def test_fastest_mixing_even_cycle_matches_closed_form(n):
    # uniform weight w: eigenvalues 1 - 2w(1 - cos(2 pi k / n)); equating lambda_2 (k = 1) with -lambda_n = 4w - 1
    c = np.cos(2 * np.pi / n)
    w = 1 / (3 - c)
    assert _slem(fastest_mixing_gossip(ring_graph(n))) == pytest.approx(1 - 2 * w * (1 - c), abs=1e-3)


@pytest.mark.parametrize("topology", ["grid", "rgg"])
def test_fastest_mixing_is_valid_and_beats_the_heuristics(topology):
    A = make_graph(topology, 16)
    P = fastest_mixing_gossip(A)
    np.testing.assert_allclose(P, P.T, atol=1e-15)
    np.testing.assert_allclose(P.sum(0), 1, atol=1e-12)
    np.testing.assert_allclose(P.sum(1), 1, atol=1e-12)
    assert P.min() >= 0
    assert np.all(P[~A & ~np.eye(16, dtype=bool)] == 0)
    assert _slem(P) <= min(_slem(max_degree_gossip(A)), _slem(metropolis_gossip(A))) + 1e-12


def test_rgg_is_connected_and_deterministic():
    a = make_network("rgg", 16, radius=0.5, seed=3)
    b = make_network("rgg", 16, radius=0.5, seed=3)
    np.testing.assert_array_equal(a.adjacency, b.adjacency)
    assert a.diameter >= 1


def test_bad_inputs():
    A = complete_graph(4)
    with pytest.raises(ValueError, match="not doubly stochastic"):
        check_gossip(np.full((4, 4), 0.3), A)
    bad = max_degree_gossip(A)
    bad[0, 0] += 0.1
    bad[0, 1] -= 0.1
    with pytest.raises(ValueError, match="not doubly stochastic"):
        check_gossip(bad, A)
    ring = ring_graph(4)
    with pytest.raises(ValueError, match="not graph edges"):
        check_gossip(max_degree_gossip(A), ring)
    with pytest.raises(ValueError, match="negative"):
        check_gossip(np.array([[1.5, -0.5], [-0.5, 1.5]]))
    disconnected = np.zeros((4, 4), bool)
    disconnected[0, 1] = disconnected[1, 0] = disconnected[2, 3] = disconnected[3, 2] = True
    with pytest.raises(ValueError, match="disconnected"):
        build_network(disconnected)
    with pytest.raises(ValueError, match="disconnected"):
        build_network(disconnected, rule="fastest")
    with pytest.raises(ValueError, match="disconnected"):
        fastest_mixing_gossip(disconnected)
    with pytest.raises(ValueError, match="unknown gossip rule"):
        make_network("ring", 4, rule="sdp")
    with pytest.raises(ValueError, match="perfect-square"):
        make_network("grid", 10)
    with pytest.raises(ValueError, match="unknown topology"):
        make_network("star", 10)
    with pytest.raises(ValueError, match="no connected random geometric graph"):
        make_network("rgg", 50, radius=0.01)
