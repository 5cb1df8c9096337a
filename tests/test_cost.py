"""labkit.cost: the guide's cost table, the alpha-beta scaling model, break-even arithmetic,
plots and widgets. All fast: no processes, no network."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from labkit import cost  # noqa: E402
from labkit.collectives.alphabeta import AlphaBeta  # noqa: E402
from labkit.course.results import RESULTS_ENV, as_dict, save_result  # noqa: E402
from labkit.errors import ParameterError  # noqa: E402

GUIDE = (Path(__file__).resolve().parents[2] / "shared" / "seed"
         / "distributed-ai-agents-on-gpu-clusters.txt")  # next to the checkout, as in data/README
HEADER = ",".join(cost.GUIDE_COST_COLUMNS)
GOOD_ROW = "8x A100 80GB (NVLink),AWS p4d.24xlarge,19200,72,EFA networking included,guide,2026-03"


@pytest.fixture(autouse=True)
def _results_in_tmp(tmp_path, monkeypatch):
    """lab_alpha_beta reads the run's results folder: keep it empty and out of the repo."""
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "results"))


# ---- the guide's table ---------------------------------------------------------------------

def test_guide_table_loads_with_every_column():
    rows = cost.load_guide_costs()
    assert [(r.configuration, r.cloud_provider, r.cost_3_days_usd, r.wall_time_hours)
            for r in rows] == [
        ("8x A100 80GB (NVLink)", "AWS p4d.24xlarge", 19200, 72),
        ("8x H100 80GB (PCIe)", "GCP a3-highgpu-8g", 22800, 58),
        ("4x H100 80GB (NVLink)", "Lambda Labs", 8400, 96),
        ("32x A100 80GB (cluster)", "AWS p4de.22xlarge x4", 76800, 22),
    ]
    for r in rows:
        assert all(getattr(r, f.name) not in ("", None) for f in dataclasses.fields(r))
        assert (r.source, r.as_of) == ("guide", "2026-03")
    assert rows[1].notes == "Faster GPUs, bottleneck on interconnect"  # quoted comma kept
    assert [r.n_gpus for r in rows] == [8, 8, 4, 32]
    assert rows[0].gpu == "A100 80GB"


def test_guide_rows_match_the_guide_text():
    """Every figure in the CSV appears in the guide's table as written there."""
    if not GUIDE.exists():
        pytest.skip("the guide is not next to this checkout")
    text = GUIDE.read_text()
    for r in cost.load_guide_costs():
        line = (f"{r.configuration}\t{r.cloud_provider}\t${r.cost_3_days_usd:,.0f}\t"
                f"{r.wall_time_hours:g} hours\t{r.notes}")
        assert line in text, line


@pytest.mark.parametrize(("line", "message"), [
    ("8x A100 80GB (NVLink),AWS,$19,200,72,x,guide,2026-03", "line 2: 8 fields, expected 7"),
    ("8x A100 80GB (NVLink),AWS,19200,72,x,guide", "line 2: missing as_of"),
    ("8x A100 80GB (NVLink),AWS,abc,72,x,guide,2026-03", "line 2: cost_3_days_usd 'abc' is not"),
    ("8x A100 80GB (NVLink),AWS,19200,-1,x,guide,2026-03", "line 2: wall_time_hours must be"),
    ("A100 80GB (NVLink),AWS,19200,72,x,guide,2026-03", "line 2: configuration"),
    ("8x A100 80GB (NVLink),AWS,19200,72,x,guide,March 2026", "line 2: as_of"),
])
def test_a_malformed_row_names_its_line(tmp_path, line, message):
    path = tmp_path / "costs.csv"
    path.write_text(f"{HEADER}\n{line}\n")
    with pytest.raises(ParameterError, match=re.escape(message)):
        cost.load_guide_costs(path)


def test_a_bad_row_after_good_ones_names_the_right_line(tmp_path):
    path = tmp_path / "costs.csv"
    path.write_text(f"{HEADER}\n{GOOD_ROW}\n{GOOD_ROW}\n{GOOD_ROW.replace('19200', '1x')}\n")
    with pytest.raises(ParameterError, match="costs.csv line 4"):
        cost.load_guide_costs(path)


def test_a_wrong_header_or_empty_file_is_refused(tmp_path):
    path = tmp_path / "costs.csv"
    path.write_text("configuration,cost\n8x A100,1\n")
    with pytest.raises(ParameterError, match="line 1: columns must be"):
        cost.load_guide_costs(path)
    path.write_text(f"{HEADER}\n")
    with pytest.raises(ParameterError, match="no rows"):
        cost.load_guide_costs(path)
    with pytest.raises(ParameterError, match="cannot read"):
        cost.load_guide_costs(tmp_path / "missing.csv")


def test_implied_prices_and_the_guides_own_arithmetic():
    a8, h8, lam, a32 = cost.load_guide_costs()
    assert a8.price_per_gpu_hour("3 days") == pytest.approx(19200 / (8 * 72))
    assert lam.price_per_gpu_hour("wall time") == pytest.approx(8400 / (4 * 96))
    # the two AWS rows are the same $/GPU-hour over 72 h: the 32-GPU cost is not its 22 h
    assert a32.price_per_gpu_hour("3 days") == pytest.approx(a8.price_per_gpu_hour("3 days"))
    with pytest.raises(ParameterError, match="basis"):
        a8.price_per_gpu_hour("monthly")
    checks = {c.topic: c for c in cost.guide_cost_checks()}
    assert "56.25%" in checks["Lambda vs AWS"].its_numbers_give
    assert "58 h vs 72 h" in checks["A100 NVLink vs H100 PCIe"].its_numbers_give
    assert "96 h" in checks["3-day cost vs wall time"].its_numbers_give
    # the "PCIe" row is an NVLink machine by its instance name, and the check says so, with sources
    assert "an NVLink machine" in checks["A100 NVLink vs H100 PCIe"].its_numbers_give
    assert any("cloud.google.com" in u for u in checks["A100 NVLink vs H100 PCIe"].sources)
    assert not checks["Lambda vs AWS"].sources  # arithmetic on the guide's numbers only


# ---- the table's instance names, list prices and hardware prices ---------------------------

def test_instance_names_contradict_the_labels(tmp_path):
    a8, h8, lam, a32 = cost.load_guide_costs()
    assert cost.instance_fact(lam) == ("", 1, None)  # "Lambda Labs" names no instance
    assert cost.instance_fact(a32)[:2] == ("p4de.22xlarge", 4)  # its family's one instance:
    assert cost.instance_fact(a32)[2].name == "p4de.24xlarge"
    [mem], [pcie], [missing] = map(cost.instance_mismatches, (a8, h8, a32))  # a32: 4 x 8 = 32
    assert "40 GB, not 80 GB" in mem and "p4de.24xlarge" in mem and "not PCIe" in pcie
    assert "p4de.22xlarge does not exist" in missing and cost.instance_mismatches(lam) == []
    check = next(c for c in cost.guide_cost_checks() if c.topic == "instance names vs labels")
    assert check.sources == (cost.INSTANCE_FACTS[0].source, cost.INSTANCE_FACTS[2].source)
    path = tmp_path / "costs.csv"  # labels that match their instance are not flagged
    path.write_text(f"{HEADER}\n8x A100 40GB (NVLink),AWS p4d.24xlarge,1,72,x,guide,2026-03\n"
                    "16x A100 80GB (cluster),AWS p4de.24xlarge x3,1,72,x,guide,2026-03\n")
    good, bad_count = cost.load_guide_costs(path)
    assert cost.instance_mismatches(good) == []
    assert cost.instance_mismatches(bad_count) == ["3 x p4de.24xlarge is 24 GPUs, not 16"]


def test_list_prices_and_the_price_parameter():
    for p in cost.LIST_PRICES:
        assert p.source.startswith("https://") and re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", p.as_of)
        assert p.per_instance_hour == pytest.approx(p.per_gpu_hour * p.gpus)
        assert cost.list_price(p.key) is p  # keys are unique
    assert cost.list_price("aws-p4d").per_gpu_hour == pytest.approx(21.957642 / 8)  # $2.7447
    with pytest.raises(ParameterError, match="no list price"):
        cost.list_price("aws-p4de.22xlarge")
    default = cost.choose_price(None)  # the notebook's default: Lambda's listed H100 SXM
    assert (default.kind, default.usd_per_gpu_hour, default.source) == (
        "list", 3.99, "https://lambda.ai/pricing")
    assert cost.choose_price("guide").usd_per_gpu_hour == pytest.approx(8400 / (4 * 72))
    assert cost.choose_price("aws-p5").usd_per_gpu_hour == pytest.approx(55.04 / 8)
    assert cost.choose_price(2).usd_per_gpu_hour == 2.0 and cost.choose_price(2).kind == "input"
    for bad in ("cheap", 0, -1.0, math.nan):
        with pytest.raises(ParameterError, match="price_per_gpu_hour"):
            cost.choose_price(bad)


def test_the_guides_prices_look_like_instance_hours_billed_per_gpu():
    by = {c.configuration: c for c in cost.guide_vs_list()}
    a8 = by["8x A100 80GB (NVLink)"]
    assert a8.list_key == "aws-p4d" and len(by) == 4
    assert a8.per_gpu_ratio == pytest.approx((19200 / 576) / (21.957642 / 8))  # about 12x
    assert a8.vs_instance_rate == pytest.approx((19200 / 576) / 21.957642)  # about 1.5
    assert all(c.per_gpu_ratio > 5 and 0.5 < c.vs_instance_rate < 2 for c in by.values())
    assert [r.per_gpu for r in cost.CAPEX_REFERENCES] == [(37_500, 50_000), (30_000, 30_000)]
    guide_per_gpu = cost.GUIDE_CAPEX_USD / cost.ASSUMED_ONPREM_GPUS  # $17.5K, servers included
    assert all(ref.per_gpu[0] > guide_per_gpu for ref in cost.CAPEX_REFERENCES)
    at_list = dataclasses.replace(cost.OnPremAssumptions(), cloud_price_per_gpu_hour=3.99)
    assert at_list.utilisation_for(14) == pytest.approx(20_000 / (16 * 730 * 3.99))  # 42.9%


# ---- the scaling model ---------------------------------------------------------------------

def test_ring_allreduce_matches_hand_computed_values():
    # n=4, 1 MB, alpha 10 us, 1 GB/s: 2*3*10us + 2*3/4 * 1e6 B * 1 ns = 60 us + 1.5 ms
    assert cost.allreduce_time(4, 1e6, 10e-6, 1e-9) == pytest.approx(60e-6 + 1.5e-3)
    # n=2: 2 hops, bandwidth term 2*1/2 = 1 x bytes
    assert cost.allreduce_time(2, 1e6, 10e-6, 1e-9) == pytest.approx(20e-6 + 1e-3)
    # n=8 halving-doubling: 2*log2(8) = 6 hops, same bandwidth term 2*7/8
    assert cost.allreduce_time(8, 1e6, 10e-6, 1e-9, "halving_doubling") == pytest.approx(
        60e-6 + 1.75e-3)
    assert cost.allreduce_time(1, 1e9, 1.0, 1.0) == 0.0
    assert cost.allreduce_hops(5, "halving_doubling") == 6  # ceil(log2 5) = 3
    with pytest.raises(ParameterError, match="algorithm"):
        cost.allreduce_time(4, 1, 1, 1, "tree")


def test_the_bandwidth_term_is_busbw_as_nccl_tests_defines_it():
    """beta = 1/busbw: an all-reduce of S bytes takes S/algbw with algbw = busbw * n/(2(n-1))."""
    fit = AlphaBeta("all_reduce", "nccl", 8, alpha_us=0.0, beta_gbps=40.0,
                    busbw_gbps=40.0 * 2 * 7 / 8, r2=1.0, points=10)
    model = cost.ScalingModel.from_alpha_beta(fit, compute_s_per_step=1.0, grad_bytes=1e9)
    assert model.comm_s(8) == pytest.approx(fit.predict_us(1e9) * 1e-6)
    assert model.busbw_gbps == pytest.approx(70.0)


def test_from_alpha_beta_spreads_the_fitted_latency_over_the_hops():
    fit = AlphaBeta("all_reduce", "gloo", 4, alpha_us=600.0, beta_gbps=1.0, busbw_gbps=1.5,
                    r2=1.0, points=5)
    model = cost.ScalingModel.from_alpha_beta(fit, 0.01, 1e6)
    assert model.alpha_s == pytest.approx(600e-6 / 6)  # ring at 4 ranks: 6 hops
    assert model.comm_s(4) == pytest.approx(fit.predict_us(1e6) * 1e-6)
    with pytest.raises(ParameterError, match="2 ranks"):
        cost.ScalingModel.from_alpha_beta(dataclasses.replace(fit, n=1), 0.01, 1e6)


def test_without_latency_step_time_falls_monotonically():
    model = cost.ScalingModel(compute_s_per_step=1.0, alpha_s=0.0, beta_s_per_byte=1e-10,
                              grad_bytes=1e8)  # 2 S beta = 0.02 s < compute
    times = [model.step_time(n) for n in range(1, 257)]
    assert all(b < a for a, b in zip(times, times[1:], strict=False))
    assert model.best_n(256) == 256
    assert model.optimal_n() == math.inf
    assert model.throughput(4) == pytest.approx(1 / model.step_time(4))


def test_when_communication_outweighs_compute_one_gpu_is_fastest():
    model = cost.ScalingModel(1e-3, 0.0, 1e-9, 1e6)  # 2 S beta = 2 ms > 1 ms of compute
    assert model.best_n(64) == 1
    assert model.optimal_n() == 1.0
    assert model.alpha_where_slower(1) == 0.0


def test_with_a_large_alpha_a_minimum_exists_and_best_n_finds_it():
    model = cost.ScalingModel(compute_s_per_step=1.0, alpha_s=1e-3, beta_s_per_byte=1e-10,
                              grad_bytes=1e8)
    times = {n: model.step_time(n) for n in range(1, 129)}
    best = min(times, key=times.get)
    assert model.best_n(128) == best
    assert 1 < best < 128
    assert times[best + 1] > times[best] and times[best - 1] >= times[best]
    assert best == round(model.optimal_n()) or abs(best - model.optimal_n()) < 1
    stop = model.where_more_gpus_stop_paying(128)
    assert stop.fastest_n == best and stop.slower_after == best
    assert stop.stop_at <= best


def test_alpha_thresholds_are_exact():
    base = cost.ScalingModel(1.0, 0.0, 1e-10, 1e8)
    threshold = base.alpha_where_slower(32, 64)
    assert threshold == pytest.approx((1.0 - 2 * 1e8 * 1e-10) / (2 * 32 * 64))
    above = dataclasses.replace(base, alpha_s=threshold * 1.001)
    below = dataclasses.replace(base, alpha_s=threshold * 0.999)
    assert above.step_time(64) > above.step_time(32)
    assert below.step_time(64) < below.step_time(32)
    low, high = base.alpha_range_for_best_n(32, 64)
    for alpha in (low * 1.001, high * 0.999):
        assert dataclasses.replace(base, alpha_s=alpha).best_n(64) == 32


def test_more_gpus_slower_reproduces_the_guides_sweet_spot():
    demo = cost.more_gpus_slower(cost.ScalingModel(1.0, 0.0, 1e-10, 1e8), n=32, m=64)
    assert demo.best_n == 32
    assert demo.step_m_s > demo.step_n_s


def test_efficiency_criterion_stops_before_the_fastest_n():
    model = cost.ScalingModel(1.0, 0.0, 1e-10, 1e8)
    stop = model.where_more_gpus_stop_paying(128, min_efficiency=0.5)
    assert stop.fastest_n == 128 and stop.slower_after is None
    assert model.table(128)[stop.efficient_up_to - 1].efficiency >= 0.5
    assert model.table(128)[stop.efficient_up_to].efficiency < 0.5
    assert stop.stop_at == stop.efficient_up_to < 128


def test_the_lab_fit_is_read_from_the_run_or_flagged_as_default():
    model, lab = cost.lab_scaling_model()
    assert not lab.measured_here and "default" in lab.note
    assert model.grad_bytes == cost.LAB_POLICY_PARAMS * 4
    assert model.best_n(16) == 1  # on the lab's link, the small policy never gains
    save_result(cost.ALPHA_BETA_RESULT, AlphaBeta("all_reduce", "nccl", 2, 20.0, 100.0, 100.0,
                                                  0.99, 12).to_dict())
    model, lab = cost.lab_scaling_model()
    assert lab.measured_here and lab.fit.backend == "nccl"
    assert model.alpha_s == pytest.approx(10e-6)  # 20 us over 2 ring hops
    assert model.best_n(64) > 1


def test_model_inputs_are_validated():
    with pytest.raises(ParameterError, match="compute_s_per_step"):
        cost.ScalingModel(0.0, 0.0, 0.0, 0.0)
    with pytest.raises(ParameterError, match="alpha_s"):
        cost.ScalingModel(1.0, -1.0, 0.0, 0.0)
    with pytest.raises(ParameterError, match="GPU count"):
        cost.ScalingModel(1.0, 0.0, 0.0, 0.0).step_time(0)


# ---- cost and break-even -------------------------------------------------------------------

def test_run_cost_and_cost_per_solved_run():
    assert cost.run_cost(8, 72, 33.33) == pytest.approx(8 * 72 * 33.33)
    assert cost.run_cost(8, 72, 10.0, utilisation=0.5) == pytest.approx(8 * 144 * 10.0)
    assert cost.cost_per_solved_run(1000.0, 0.25) == pytest.approx(4000.0)
    with pytest.raises(ParameterError, match="success_rate"):
        cost.cost_per_solved_run(1.0, 0.0)
    with pytest.raises(ParameterError, match="utilisation"):
        cost.run_cost(1, 1, 1, utilisation=0)
    model = cost.ScalingModel(3600.0, 0.0, 0.0, 0.0)  # one hour per step on one GPU
    est = cost.job_estimates(model, 4, steps=2, price_per_gpu_hour=3.0)
    assert [e.hours for e in est] == pytest.approx([2.0, 1.0, 2 / 3, 0.5])
    assert [e.cost_usd for e in est] == pytest.approx([6.0] * 4)  # perfect scaling: same $


def test_break_even_arithmetic():
    assert cost.break_even_months(120_000, 2_000, 12_000) == pytest.approx(12.0)
    assert cost.break_even_months(100_000, 0, 10_000) == pytest.approx(10.0)
    assert cost.break_even_months(100_000, 5_000, 5_000) == math.inf
    with pytest.raises(ParameterError):
        cost.break_even_months(-1, 0, 1)


def test_the_guides_break_even_is_reproduced_from_the_documented_inputs():
    a = cost.OnPremAssumptions()
    assert a.capex_usd == 280_000
    assert a.cloud_price_per_gpu_hour == pytest.approx(8400 / (4 * 72))  # the guide's Lambda row
    assert a.n_gpus == 16 and a.monthly_opex_usd == 0.0  # assumptions, documented
    assert a.break_even_months() == pytest.approx(14.0)
    # 16 GPUs x 730 h x $29.17 x u = $20,000 a month: u = 5.87%
    assert a.utilisation == pytest.approx(20_000 / (16 * 730 * 8400 / 288))
    assert a.utilisation_for(14) == pytest.approx(a.utilisation)
    be = cost.guide_break_even()
    assert be.months == pytest.approx(14.0)
    assert be.monthly_saving_needed_usd == pytest.approx(20_000)
    assert be.guide_lambda_runs_per_month == pytest.approx(20_000 / 8_400)
    # break-even is inversely proportional to capex' reciprocal inputs: halve -> x2, double -> /2
    assert be.sensitivity["utilisation"] == pytest.approx((28.0, 7.0))
    assert be.sensitivity["capex_usd"] == pytest.approx((7.0, 28.0))
    assert be.sensitivity["monthly_opex_usd"] == pytest.approx((14 / 0.75, 28.0))
    json.dumps(as_dict(be), allow_nan=False)
    half = dataclasses.replace(a, utilisation=0.5)
    assert half.break_even_months() < 2  # at the guide's prices a half-busy cluster pays in weeks


def test_break_even_sweep_and_validation():
    a = cost.OnPremAssumptions()
    sweep = cost.break_even_sweep(a, "monthly_opex_usd", [0.0, a.monthly_cloud_cost()])
    assert sweep[0][1] == pytest.approx(14.0) and sweep[1][1] == math.inf
    with pytest.raises(ParameterError, match="unknown input"):
        cost.break_even_sweep(a, "price", [1.0])
    with pytest.raises(ParameterError, match="utilisation"):
        cost.OnPremAssumptions(utilisation=1.5)


# ---- plots and widgets ---------------------------------------------------------------------

def test_plot_functions_return_figures():
    from matplotlib.figure import Figure

    model = cost.ScalingModel(1.0, 3e-4, 1e-10, 1e8)
    figs = [cost.plot_scaling(model, 64, mark_n=8),
            cost.plot_cost(model, 64, steps=1000, price_per_gpu_hour=2.0, utilisation=0.8,
                           success_rate=0.5, mark_n=8),
            cost.plot_break_even(),
            cost.plot_guide_costs()]
    for fig in figs:
        assert isinstance(fig, Figure) and fig.axes
        fig.canvas.draw()  # renders with Agg without error
    assert "guide's own figures" in figs[3]._suptitle.get_text()


def test_widgets_build_and_a_slider_change_redraws():
    pytest.importorskip("ipywidgets")
    model = cost.ScalingModel(1.0, 3e-4, 1e-10, 1e8)
    ui = cost.widgets_for(model, max_n=32, steps=1000)
    assert set(ui.controls) == {"n_gpus", "price_per_gpu_hour", "bandwidth_gbps", "alpha_us",
                                "utilisation", "algorithm"}
    assert ui.redraws == 1 and len(ui.output.outputs) == 2
    assert ui.output.outputs[0]["data"]["image/png"]
    before = dict(ui.summary)
    ui.controls["n_gpus"].value = 16  # the observer runs the callback
    assert ui.redraws == 2 and ui.summary["n_gpus"] == 16
    assert "16 GPUs" in ui.output.outputs[0]["data"]["text/plain"]
    assert ui.summary["cost_usd"] == pytest.approx(
        cost.run_cost(16, model.run_hours(16, 1000), before["price_per_gpu_hour"]))
    ui.controls["alpha_us"].value = 10_000  # a slow link: fewer GPUs are fastest
    assert ui.summary["fastest_n"] < before["fastest_n"]
    ui.controls["algorithm"].value = "halving_doubling"
    assert ui.model.algorithm == "halving_doubling"
    ui.controls["price_per_gpu_hour"].unobserve(ui.update, names="value")
    ui.controls["price_per_gpu_hour"].value = before["price_per_gpu_hour"] * 2
    summary = ui.update()  # the callback, called directly
    assert summary == ui.summary and ui.redraws == 5
    assert summary["cost_usd"] == pytest.approx(
        cost.run_cost(16, ui.model.run_hours(16, 1000), before["price_per_gpu_hour"] * 2))


def test_overlap_and_the_comparison_with_measurements() -> None:
    from types import SimpleNamespace

    m = cost.ScalingModel(compute_s_per_step=1.0, alpha_s=300e-6, beta_s_per_byte=1 / 10e9,
                          grad_bytes=100e6)
    for n in (1, 8, 64):
        assert m.overlap_step(n) == max(m.compute_s(n), m.comm_s(n)) <= m.step_time(n)
    fastest = m.best_n_with_overlap(128)  # hiding the all-reduce never makes the best step slower
    assert m.overlap_step(fastest) <= m.step_time(m.best_n(128))
    assert all(m.overlap_step(fastest) <= m.overlap_step(n) for n in range(1, 129))
    alpha, beta = 1e-5, 1e-9
    measured = {4: SimpleNamespace(rows=[SimpleNamespace(size=1024, time_us=50.0)])}
    (row,) = cost.compare_to_measured(measured, {"link": (alpha, beta)})
    model_us = cost.allreduce_time(4, 1024, alpha, beta) * 1e6
    assert row["hops"] == cost.allreduce_hops(4) and row["link"] == model_us
    assert row["link ratio"] == model_us / 50.0


def test_what_one_more_rank_costs_model_against_measurement() -> None:
    from types import SimpleNamespace

    # 2 ranks: 2 hops of 100 us; busbw 1 GB/s: beta 1 ns per byte
    fit = AlphaBeta("all_reduce", "gloo", 2, alpha_us=200.0, beta_gbps=1.0, busbw_gbps=1.0,
                    r2=1.0, points=4)
    alpha, beta = cost.link_of(fit)

    def sweep(times):
        return SimpleNamespace(rows=[SimpleNamespace(size=s, time_us=t) for s, t in times.items()])

    two = {2: sweep({4096: 210.0, 262144: 470.0, 4194304: 4400.0})}
    one = cost.rank_cost(two, fit)  # nearest the policy's 270 KB: 256 KiB; from 1 rank (0 us)
    assert (one.size, one.n_from, one.n_to) == (262144, 1, 2)
    assert one.measured_us == 470.0 and one.reason == ""
    assert one.model_us == pytest.approx(cost.allreduce_time(2, 262144, alpha, beta) * 1e6)
    more = cost.rank_cost({**two, 4: sweep({262144: 1000.0})}, fit)
    assert (more.n_from, more.n_to, more.measured_us) == (2, 4, (1000.0 - 470.0) / 2)
    model = (cost.allreduce_time(4, 262144, alpha, beta) - cost.allreduce_time(2, 262144, alpha, beta)) / 2
    assert more.model_us == pytest.approx(model * 1e6)
    # every GPU adds two hops: the 64th costs 2 alpha and a sliver of bandwidth
    assert more.hop_us == pytest.approx(100.0)
    assert 200.0 < more.sixty_fourth_us < 200.0 + 262144 * 1e-9 * 1e6 * 2 / (63 * 64) + 1e-6
    missing = cost.rank_cost({**two, 4: sweep({4096: 300.0})}, fit)
    assert missing.measured_us is None and "no all_reduce of 262,144 B" in missing.reason
