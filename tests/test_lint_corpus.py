"""The public-config corpus (tests/corpus/): every error lint reports there has been judged.

A new error finding (a rule change, a new corpus file) fails here until someone judges it in
tests/corpus/verdicts.yaml against the framework's source; so do crashes. The figures
(precision, recall on injected mistakes) are printed by bench/lint_corpus.py.
"""

import importlib.util
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("lint_corpus", ROOT / "bench" / "lint_corpus.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def corpus():
    return bench.collect()


def test_corpus_is_cited_and_big_enough():
    entries = bench.sources()
    assert len(entries) >= 150
    for e in entries + bench.sources("pins"):
        assert set(e) >= {"repo", "path", "commit", "licence", "split"} and len(e["commit"]) == 40, e
        assert (bench.repo_folder(e["repo"]) / e["path"]).is_file(), e
        assert e["split"] == ("held-out" if bench.held_out_repo(e["repo"]) else "tuning"), e


def test_no_crash(corpus):
    _, _, crashes = corpus
    assert not crashes, crashes


def test_every_error_finding_is_judged(corpus):
    findings, _, _ = corpus
    verdicts = bench.load_verdicts()
    unjudged = [f for k, f in findings.items() if k not in verdicts]
    assert not unjudged, "judge these in tests/corpus/verdicts.yaml:\n" + yaml.safe_dump(unjudged, width=400)


def test_verdicts_are_complete():
    for v in bench.load_verdicts().values():
        assert v["verdict"] in ("real", "real-today", "false-alarm"), v
        assert isinstance(v.get("reason"), str) and len(v["reason"]) > 30, v


def test_framework_example_folders_have_no_false_error(corpus):
    # The bar: LLaMA-Factory's, TRL's and DeepSpeed's own example folders.
    findings, _, _ = corpus
    verdicts = bench.load_verdicts()
    owners = ("hiyouga__LLaMA-Factory/", "huggingface__trl/", "deepspeedai__DeepSpeedExamples/")
    false = [k for k in findings if k[0].startswith(owners) and verdicts.get(k, {}).get("verdict") != "real" and verdicts.get(k, {}).get("verdict") != "real-today"]
    assert not false, false
