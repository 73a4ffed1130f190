"""The report's Compression section: a pointer in the default report, the Primer-layout table when asked
(``--sections compression``), and ``bertology compress`` answering bad input in one line before torch loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys



def test_the_compression_section_runs_only_when_asked(tmp_path, monkeypatch):
    from bertology.models.tiny import tiny_encoder
    from bertology.report import run_report

    monkeypatch.setenv("BERTOLOGY_CACHE", str(tmp_path / "cache"))
    # two of the section's methods keep the test short; every method is tested in test_compression.py
    monkeypatch.setattr("bertology.report.compression.REPORT_METHODS", "heads-importance:0.5,drop-top:{drop}")
    encoder = tiny_encoder("bert", layers=2, hidden=32, heads=4, attentions=False)
    asked = run_report(encoder=encoder, out=tmp_path / "asked", sections=["compression"], max_sentences=8,
                       seeds=(0,), progress=False)
    page = asked.path.read_text(encoding="utf-8")
    assert "did not run" not in page
    assert "compression-table" in page and "drop-top-1" in page and "heads-importance-0.5" in page


def test_the_default_report_only_points_at_the_section():
    from bertology.report.compression import compression
    from bertology.report.context import ReportContext

    context = ReportContext(encoder=None, model_name="m", out_dir=None, cache=None, dev=[], test=[], seeds=(0,),
                            max_sentences=None)
    section = compression(context)
    assert "--sections compression" in section.blocks[0].html


CASES = [
    (["compress", "--methods", "magnitude:1.5"], "sparsity 1.5 is outside [0, 1)"),
    (["compress", "--methods", "zip"], "unknown method 'zip'"),
    (["compress", "--rounds", "0"], "--rounds 0"),
    (["compress", "--teacher", "/no/such/teacher"], "not an alias"),
]


def test_bad_compress_options_are_one_line_before_torch_loads():
    code = ("import contextlib, io, json, sys\nfrom bertology.cli import main\nresults = []\n"
            f"for argv in {[argv for argv, _ in CASES]!r}:\n"
            "    sys.argv = ['bertology', *argv]\n    err = io.StringIO()\n"
            "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):\n"
            "        try:\n            main()\n        except SystemExit as exit_:\n"
            "            results.append((exit_.code, err.getvalue()))\n"
            "print(json.dumps([results, 'torch' in sys.modules]))\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    results, torch_loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert not torch_loaded
    for (argv, message), (code_, output) in zip(CASES, results):
        assert code_ == 1 and message in output, (argv, output)
        assert len([line for line in output.splitlines() if line.strip()]) == 1, output
