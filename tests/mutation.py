"""Mutation testing of the modules that define correctness (mutmut 3): ``python -m tests.mutation MODULE ...``.

Each module is mutated by `mutmut <https://github.com/boxed/mutmut>`_ in a scratch
copy of the tracked files (a new ``$TMPDIR/qa-mutation/<module>.XXXX`` per run, so
runs can go side by side and the checkout is never touched),
against only the fast unit tests of that module (``MODULE_TESTS``; mutmut
then runs, per mutant, only the tests that reach the mutated function).  The
result is one row per module -- mutants, killed, survived, without a test,
timeouts, equivalent, score -- printed as Markdown and, with ``--json``, saved.

Score = (killed + timeouts) / (mutants - equivalent).  A mutant no selected test
reaches counts as surviving.  ``EQUIVALENT`` names mutants that cannot change
any result, each with the reason (mutmut numbers mutants per function, so a
name stays valid until that function changes; a stale name is reported).

    python -m tests.mutation eval/retrieval_metrics.py            # one module, its table row
    python -m tests.mutation eval/retrieval_metrics.py --show     # and the diff of every survivor
    python -m tests.mutation --all --json docs/mutation.json       # every module of MODULE_TESTS

Not part of CI (minutes per module); ``tests/test_mutation_smoke.py`` runs a
small module through it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# module -> the unit tests that define its behaviour (fast: seconds per run)
MODULE_TESTS: dict[str, list[str]] = {
    "eval/retrieval_metrics.py": ["tests/test_retrieval_metrics.py"],
    "eval/answer_metrics.py": ["tests/test_answer_metrics.py"],
    "eval/dpr_accuracy.py": ["tests/test_dpr_accuracy_mutants.py", "tests/test_open_corpus.py::test_has_answer_equals_pyserini_on_non_ascii_text",
                             "tests/test_open_corpus.py::test_regex_match_equals_pyserini"],
    "eval/tradeoff.py": ["tests/test_tradeoff_mutants.py", "tests/test_sweep.py::test_regret_on_a_hand_computed_table", "tests/test_sweep.py::test_regret_errors",
                         "tests/test_sweep.py::test_regret_is_zero_for_a_system_best_everywhere_and_nonnegative",
                         "tests/test_sweep.py::test_bootstrap_replicates_are_weighted_means"],
    "data/sentences.py": ["tests/test_reqa_squad.py", "tests/test_sentences_mutants.py"],
    "data/reqa.py": ["tests/test_reqa_squad.py", "tests/test_reqa_mutants.py"],
    # test_reqa_squad.py / test_bad_input.py reach no squad.py mutant (cached dataset; CLI subprocess) and add ~4 min
    "data/squad.py": ["tests/test_squad_mutants.py"],
    "data/nq.py": ["tests/test_nq.py", "tests/test_nq_mutants.py"],
    "selection/top.py": ["tests/test_selectors.py", "tests/test_selection_fusion_mutants.py"],
    "selection/threshold.py": ["tests/test_selectors.py", "tests/test_selection_fusion_mutants.py"],
    "selection/ordinal.py": ["tests/test_selectors.py", "tests/test_selection_fusion_mutants.py"],
    "selection/oracle.py": ["tests/test_selectors.py", "tests/test_selection_fusion_mutants.py"],
    "selection/registry.py": ["tests/test_selectors.py", "tests/test_selection_fusion_mutants.py", "tests/test_selector_registry.py"],
    "selection/base.py": ["tests/test_selectors.py", "tests/test_selection_fusion_mutants.py", "tests/test_selection_base_mutants.py",
                          "tests/test_selector_registry.py"],
    "retrievers/rrf.py": ["tests/test_fusion.py", "tests/test_selection_fusion_mutants.py"],
    "retrievers/score_fusion.py": ["tests/test_fusion.py", "tests/test_selection_fusion_mutants.py"],
}

# mutant name -> why it cannot change a result
EQUIVALENT: dict[str, str] = {
    # eval/retrieval_metrics.py
    "eval.retrieval_metrics.x_average_ranks__mutmut_14": 'drops side="left", which is searchsorted\'s default',
    "eval.retrieval_metrics.x_best_per_question__mutmut_6": "< vs <= only rewrites an equal value under a key that already exists",
    "eval.retrieval_metrics.x_reqa_metrics__mutmut_20": "np.fromiter(dtype=None) is float64, the dtype it names",
    "eval.retrieval_metrics.x_reqa_metrics__mutmut_27": "np.fromiter(dtype=None) is float64, the dtype it names",
    "eval.retrieval_metrics.x_reqa_per_question__mutmut_10": "np.fromiter(dtype=None) is float64, the dtype it names",
    "eval.retrieval_metrics.x_reqa_per_question__mutmut_19": "np.fromiter(dtype=None) is float64, the dtype it names",
    "eval.retrieval_metrics.x_reqa_metrics__mutmut_24": "count= of np.fromiter only pre-sizes the array",
    "eval.retrieval_metrics.x_reqa_metrics__mutmut_31": "count= of np.fromiter only pre-sizes the array",
    "eval.retrieval_metrics.x_reqa_per_question__mutmut_32": "astype(None) is float64, the dtype it names",
    "eval.retrieval_metrics.x_first_relevant_rank__mutmut_3": "a float instead of a bool is_gold buffer gives the same any() and argmax()",
    "eval.retrieval_metrics.x_first_relevant_rank__mutmut_5": "a float instead of a bool is_gold buffer gives the same any() and argmax()",
    # eval/tradeoff.py
    "eval.tradeoff.x_regret__mutmut_5": "regret's own asarray only feeds .shape; gaps() converts to float64 itself",
    "eval.tradeoff.x_regret__mutmut_7": "regret's own asarray only feeds .shape; gaps() converts to float64 itself",
    "eval.tradeoff.x_regret__mutmut_26": "einsum subscripts in upper case name the same contraction",
    "eval.tradeoff.x_bootstrap_means__mutmut_3": "the weights are float64, so the matmul is float64 for any numeric x",
    "eval.tradeoff.x_bootstrap_means__mutmut_5": "the weights are float64, so the matmul is float64 for any numeric x",
    "eval.tradeoff.x_bootstrap_means__mutmut_19": "reshape(n, -2): numpy infers the dimension for any negative value",
    "eval.tradeoff.x_bootstrap_means__mutmut_21": "astype(None) is float64, the dtype it names",
    "eval.tradeoff.x_percentile_interval__mutmut_21": "np.quantile with float quantiles returns float64 for any numeric input",
    "eval.tradeoff.x_percentile_interval__mutmut_23": "np.quantile with float quantiles returns float64 for any numeric input",
    # selection/base.py
    "selection.base.x_normalize_scores__mutmut_19": "np.zeros(dtype=None) is float64, the dtype it names",
    "selection.base.x_normalize_scores__mutmut_21": "np.zeros without dtype is float64, the dtype it names",
    "selection.base.x_normalize_scores__mutmut_50": "the fill is used only for a row with no real results, whose weights are all 0 whatever the fill",
    "selection.base.x_normalize_scores__mutmut_66": "the inner fill only reaches masked-out entries, which the outer np.where replaces by 0",
    "selection.base.x_normalize_scores__mutmut_119": "weights are >= 0: total >= 0 differs from > 0 only at total 0, replaced by the even spread (a 0/0 warning only)",
    "selection.base.x_normalize_scores__mutmut_121": "the divisor fill is used only where the total is 0, replaced by the even spread",
    # data/nq.py (full run)
    "data.nq.x__annotation__mutmut_30": "a missing end_token as -2 instead of -1 still ends the long answer before it starts: skipped as empty either way",
    "data.nq.x_clean_text__mutmut_79": "bytes.decode() defaults to UTF-8, not the locale",
    "data.nq.x_clean_text__mutmut_30": "max(end, 1) vs max(end, 0): the branch needs a text token in [start, end), so end >= 1 already",
    "data.nq.x_nq_squad__mutmut_33": "only the spelling of the cache key changes",
    "data.nq.x_nq_squad__mutmut_56": "unlink(missing_ok=...) on a file is_file() just found; only a concurrent removal could differ",
    "data.nq.x_nq_squad__mutmut_57": "unlink(missing_ok=...) on a file is_file() just found; only a concurrent removal could differ",
    "data.nq.x__normalize__mutmut_50": "'UTF-8' and 'utf-8' name the same codec",
    "data.nq.x__normalize__mutmut_188": "'UTF-8' and 'utf-8' name the same codec",
    "data.nq.x_clean_text__mutmut_82": "'UTF-8' and 'utf-8' name the same codec",
    "data.nq.x_nq_squad__mutmut_48": "'UTF-8' and 'utf-8' name the same codec",
    "data.nq.x_nq_squad__mutmut_74": "'UTF-8' and 'utf-8' name the same codec",
    "data.nq.x__normalize__mutmut_88": "_title_from_url gives '' for None, '' and any URL without a title query alike",
    "data.nq.x__normalize__mutmut_90": "_title_from_url gives '' for None, '' and any URL without a title query alike",
    "data.nq.x__normalize__mutmut_93": "_title_from_url gives '' for None, '' and any URL without a title query alike",
    "data.nq.x_iter_nq_records__mutmut_30": "a progress-bar argument",
    "data.nq.x_iter_nq_records__mutmut_32": "a progress-bar argument",
    "data.nq.x_iter_nq_records__mutmut_33": "a progress-bar argument",
    "data.nq.x_iter_nq_records__mutmut_35": "a progress-bar argument",
    "data.nq.x_iter_nq_records__mutmut_36": "a progress-bar argument",
    "data.nq.x_iter_nq_records__mutmut_37": "a progress-bar argument",
    "data.nq.x_iter_nq_records__mutmut_38": "a progress-bar argument",
    "data.nq.x_iter_nq_records__mutmut_39": "a progress-bar argument",
    "data.nq.x_iter_nq_records__mutmut_40": "a progress-bar argument",
    "data.nq.x_iter_nq_records__mutmut_41": "a progress-bar argument",
    "data.nq.x_iter_nq_records__mutmut_42": "a progress-bar argument",
    "data.nq.x_nq_squad__mutmut_77": "ensure_ascii only changes the JSON escaping of the cache file; json.load returns the same dict",
    "data.nq.x_nq_squad__mutmut_80": "ensure_ascii only changes the JSON escaping of the cache file; json.load returns the same dict",
    "data.nq.x_nq_squad__mutmut_85": "ensure_ascii only changes the JSON escaping of the cache file; json.load returns the same dict",
    # data/reqa.py, data/squad.py
    "data.reqa.x_build_reqa__mutmut_28": "indexed = None at the start: `not None` is as true as `not False`",
    "data.reqa.x_build_reqa__mutmut_74": "indexed = None after indexing: re-indexing the paragraph adds nothing (its id is set, every pair is in seen_pairs)",
    "data.reqa.x_build_reqa__mutmut_75": "indexed = False after indexing: re-indexing the paragraph adds nothing (its id is set, every pair is in seen_pairs)",
    "data.reqa.x_build_reqa__mutmut_98": "gold dtype=None: a non-empty list of Python ints is int64 already",
    "data.reqa.x_build_reqa__mutmut_100": "gold dtype dropped: a non-empty list of Python ints is int64 already",
    "data.reqa.x_build_reqa__mutmut_153": "level= dropped: Dataset.level defaults to 'sentence'",
    "data.squad.x_read_json_file__mutmut_35": "'UTF-8-SIG' and 'utf-8-sig' name the same codec",
    "data.squad.x_validate_squad__mutmut_116": "is_impossible default None: only its truth is read, None reads as False",
    "data.squad.x_validate_squad__mutmut_118": "is_impossible without default: only its truth is read, None reads as False",
    # data/nq.py, eval/dpr_accuracy.py
    'data.nq.x_iter_nq_records__mutmut_24': "'UTF-8' and 'utf-8' name the same codec",
    'data.nq.x_load_reqa_nq__mutmut_1': 'skip_bad_records is never read there',
    'data.nq.x_load_reqa_nq__mutmut_44': 'only the spelling of the cache key changes',
    'data.nq.x_load_reqa_nq__mutmut_45': 'only the spelling of the cache key changes',
    'eval.dpr_accuracy.x__token_regex__mutmut_6': 'these regex flags do not change the tokenization of any code point (checked)',
    'eval.dpr_accuracy.x__token_regex__mutmut_7': 'these regex flags do not change the tokenization of any code point (checked)',
    'eval.dpr_accuracy.x__token_regex__mutmut_8': 'these regex flags do not change the tokenization of any code point (checked)',
    'eval.dpr_accuracy.xǁAnswerMatcherǁ__init____mutmut_8': 'always is only tested for truth',
    'eval.dpr_accuracy.xǁAnswerMatcherǁ__init____mutmut_48': 'the order of the prefilter tokens only changes speed',
    'eval.dpr_accuracy.xǁAnswerMatcherǁ__init____mutmut_51': 'the order of the prefilter tokens only changes speed',
    'eval.dpr_accuracy.xǁAnswerMatcherǁ__init____mutmut_52': 'the order of the prefilter tokens only changes speed',
    'eval.dpr_accuracy.xǁAnswerMatcherǁ__init____mutmut_60': 'the order of the prefilter tokens only changes speed',
    'eval.dpr_accuracy.xǁAnswerMatcherǁ__call____mutmut_15': 'the prefilter is exact: skipping it gives the same answer',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_3': 'the block size only changes memory use',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_4': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_31': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_32': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_33': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_34': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_36': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_37': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_38': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_39': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_40': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_41': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_42': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_43': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_44': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_45': 'progress-bar arguments',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_7': 'an integer dtype either way',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_9': 'an integer dtype either way',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_77': 'an integer dtype either way',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_80': 'an integer dtype either way',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_82': 'the fill value is only tested as >= 0',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_97': 'the regex branch gives the same answer as the string path',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_98': 'the regex branch gives the same answer as the string path',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_108': 'skips the per-block cache of tokenized rows: same answers',
    'eval.dpr_accuracy.x_has_answer_matrix__mutmut_109': 'skips the per-block cache of tokenized rows: same answers',
    'eval.dpr_accuracy.x_first_hit__mutmut_18': 'np.full already gives int64',
    'eval.dpr_accuracy.x_first_hit__mutmut_21': 'np.full already gives int64',
    'eval.dpr_accuracy.x_dpr_metrics__mutmut_3': 'the mask is only used through any() and top_k_accuracy, which cast it',
    'eval.dpr_accuracy.x_dpr_metrics__mutmut_5': 'the mask is only used through any() and top_k_accuracy, which cast it',
    'eval.dpr_accuracy.x_dpr_metrics__mutmut_15': '{depth} is added to the set anyway',
    'eval.dpr_accuracy.x_dpr_metrics__mutmut_33': 'an empty mask gives Q either way',
    'eval.dpr_accuracy.x_write_dpr_retrieval_json__mutmut_3': 'the rows are integers either way',
    'eval.dpr_accuracy.x_write_dpr_retrieval_json__mutmut_5': 'the rows are integers either way',
    # eval/answer_metrics.py
    'eval.answer_metrics.x_answer_tokens__mutmut_12': "'or True': the Thai tokenizer already returns [] for an empty string",
    'eval.answer_metrics.x_meteor_tokens__mutmut_1': "a default other than 'th' takes the English path, and every caller passes the language",
    'eval.answer_metrics.x_meteor_tokens__mutmut_2': "a default other than 'th' takes the English path, and every caller passes the language",
    'eval.answer_metrics.x_meteor_tokens__mutmut_7': "'or True': the Thai tokenizer returns [] for white-space-only text",
    'eval.answer_metrics.x_answer_metrics__mutmut_3': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_36': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_37': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_38': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_40': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_41': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_42': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_43': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_44': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_45': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_46': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_47': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_48': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_49': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_50': "the progress default or tqdm's desc/unit/disable: only the progress bar changes",
    'eval.answer_metrics.x_answer_metrics__mutmut_27': 'np.full(n, None, dtype=float64) or no dtype: still a float64 NaN array',
    'eval.answer_metrics.x_answer_metrics__mutmut_28': 'np.full(n, None, dtype=float64) or no dtype: still a float64 NaN array',
    'eval.answer_metrics.x_answer_metrics__mutmut_31': 'np.full(n, None, dtype=float64) or no dtype: still a float64 NaN array',
    # selection/*.py, retrievers/rrf.py, retrievers/score_fusion.py
    'selection.threshold.xǁThresholdǁpredict__mutmut_37': 'clip at None instead of 1: n = 1 + count is always at least 1',
    'selection.top.xǁTopNǁpredict__mutmut_6': 'np.full with a Python int fill is already int64',
    'selection.top.xǁTopNǁpredict__mutmut_9': 'np.full with a Python int fill is already int64',
    'selection.oracle.xǁOracleǁpredict__mutmut_15': 'clip at None instead of 1: check_ranks already rejects ranks below 1',
    'retrievers.rrf.x_reciprocal_rank_fusion__mutmut_35': 'astype(None) is float64, the dtype it names',
    'retrievers.score_fusion.x_normalize_scores__mutmut_7': 'every caller passes a bool mask (ids >= 0); a 0/1 mask selects the same',
    'retrievers.score_fusion.x_normalize_scores__mutmut_9': 'every caller passes a bool mask (ids >= 0); a 0/1 mask selects the same',
    'retrievers.score_fusion.x_normalize_scores__mutmut_17': 'astype(None) is float64, the dtype it names',
    'retrievers.score_fusion.x_normalize_scores__mutmut_23': 'empty rows are masked to 0 and single-entry rows give the same output whatever lo is',
    'retrievers.score_fusion.x_normalize_scores__mutmut_24': 'empty rows are masked to 0 and single-entry rows give the same output whatever lo is',
    'retrievers.score_fusion.x_normalize_scores__mutmut_43': 'empty rows are masked to 0 and single-entry rows give the same output whatever lo is',
    'retrievers.score_fusion.x_normalize_scores__mutmut_67': 'empty rows are masked to 0 and single-entry rows give the same output whatever lo is',
    'retrievers.score_fusion.x_normalize_scores__mutmut_77': 'changes the divisor only in the branch whose result is discarded',
    'retrievers.score_fusion.x_normalize_scores__mutmut_79': 'changes the divisor only in the branch whose result is discarded',
    'retrievers.score_fusion.x_normalize_scores__mutmut_134': 'changes the divisor only in the branch whose result is discarded',
    'retrievers.score_fusion.x_normalize_scores__mutmut_136': 'changes the divisor only in the branch whose result is discarded',
    'retrievers.score_fusion.x_normalize_scores__mutmut_180': 'changes the divisor only in the branch whose result is discarded',
    'retrievers.score_fusion.x_normalize_scores__mutmut_182': 'changes the divisor only in the branch whose result is discarded',
    'retrievers.score_fusion.x_normalize_scores__mutmut_124': 'with n = 1 the variance is 0 either way',
    'retrievers.score_fusion.x_normalized_pool_scores__mutmut_6': 'the default dtype is float64',
    'retrievers.score_fusion.x_normalized_pool_scores__mutmut_8': 'the default dtype is float64',
    'selection.ordinal.x__fit_ridge__mutmut_5': 'fit_intercept=True is already the default of mord and scikit-learn',
    'selection.ordinal.x__fit_ridge__mutmut_29': 'fit_intercept=True is already the default of mord and scikit-learn',
    'selection.ordinal.x__fit_ridge__mutmut_14': 'mord 0.7 defines __version__: the fallback default is never read',
    'selection.ordinal.x__fit_ridge__mutmut_17': 'mord 0.7 defines __version__: the fallback default is never read',
    'selection.ordinal.x__fit_ridge__mutmut_20': 'mord 0.7 defines __version__: the fallback default is never read',
    'selection.ordinal.x__fit_ridge__mutmut_36': 'reshape(None)/reshape(-2) of 1-D coefficients or a 0-d intercept changes nothing',
    'selection.ordinal.x__fit_ridge__mutmut_42': 'reshape(None)/reshape(-2) of 1-D coefficients or a 0-d intercept changes nothing',
    'selection.ordinal.x__fit_ridge__mutmut_44': 'reshape(None)/reshape(-2) of 1-D coefficients or a 0-d intercept changes nothing',
    'selection.ordinal.x__fit_ridge__mutmut_38': 'the coefficients are already float64',
    'selection.ordinal.x__fit_ridge__mutmut_40': 'the coefficients are already float64',
    'selection.ordinal.xǁOrdinalǁset_fitted_state__mutmut_4': '@ with float features gives the same for int or float coefficients',
    'selection.ordinal.xǁOrdinalǁset_fitted_state__mutmut_6': '@ with float features gives the same for int or float coefficients',
}

STATUSES = ("killed", "survived", "no tests", "timeout", "suspicious", "skipped", "not checked", "segfault")


def scratch_copy(module: str, tests: list[str], workdir: Path) -> Path:
    """The tracked files of the checkout in (new, empty) ``workdir``, with a ``[tool.mutmut]`` section for ``module``."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for name in files:
        if not name or name.startswith(("docs/img/", "bench/results/")):
            continue
        src = ROOT / name
        if src.is_file():
            dst = workdir / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    packages = sorted({n.split("/", 1)[0] for n in files if n.endswith(".py") and "/" in n and not n.startswith(("tests/", "bench/"))})
    config = (
        "\n[tool.mutmut]\n"
        f"source_paths = {json.dumps(packages)}\n"
        f"only_mutate = {json.dumps([module])}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        'pytest_add_cli_args = ["-q", "-x", "-p", "no:cacheprovider"]\n'
    )
    with open(workdir / "pyproject.toml", "a", encoding="utf-8") as f:
        f.write(config)
    # tqdm's write lock is one semaphore shared by every process mutmut forks, and a mutant that makes drawing
    # a bar raise (e.g. unit=None) leaves it held: every later mutant whose tests draw a bar then hangs until
    # mutmut's timeout, which counts as killed.  Each forked process gets its own lock instead.
    site = workdir / ".mutation-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import tqdm.std\ntqdm.std.TqdmDefaultWriteLock.mp_lock = None\n", encoding="utf-8")
    return workdir


def run_module(module: str, tests: list[str] | None = None, show: bool = False, keep: bool = False) -> dict:
    """Mutate ``module`` against ``tests`` (default ``MODULE_TESTS[module]``); the module's row."""
    if not (ROOT / module).is_file():
        raise SystemExit(f"error: {module}: no such module in the checkout")
    tests = tests or MODULE_TESTS.get(module)
    if not tests:
        raise SystemExit(f"error: {module}: no tests known for it; pass --tests")
    parent = Path(tempfile.gettempdir()) / "qa-mutation"
    parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=module.replace("/", "_") + ".", dir=parent))  # concurrent runs never share one
    scratch_copy(module, tests, workdir)
    env = dict(os.environ)
    data = Path(env.get("QA_DATA_DIR") or ROOT.parent / "shared" / "data")
    env["QA_DATA_DIR"] = str(data.resolve() if data.is_absolute() else (ROOT / data).resolve())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(workdir / ".mutation-site"), env.get("PYTHONPATH", "")) if p)
    t0 = time.perf_counter()
    log = workdir / "mutmut.log"
    with open(log, "w", encoding="utf-8") as f:
        rc = subprocess.run([sys.executable, "-m", "mutmut", "run"], cwd=workdir, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"error: mutmut run failed for {module} (exit {rc}); log: {log}")
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=workdir, env=env,
                         capture_output=True, text=True, check=True).stdout
    status: dict[str, str] = {}
    for line in out.splitlines():
        name, sep, state = line.strip().rpartition(": ")
        if sep and state in STATUSES:
            status[name] = state
    counts = {s: sum(1 for v in status.values() if v == s) for s in STATUSES}
    equivalent = [n for n in status if n in EQUIVALENT]
    stale = [n for n in EQUIVALENT if n.startswith(module[:-3].replace("/", ".") + ".") and n not in status]
    survivors = [n for n, s in status.items() if s in ("survived", "no tests") and n not in EQUIVALENT]
    killed = counts["killed"] + counts["timeout"]
    denominator = len(status) - len(equivalent)
    row = {"module": module, "tests": tests, "mutants": len(status), "killed": counts["killed"], "timeout": counts["timeout"],
           "survived": counts["survived"], "no_tests": counts["no tests"], "equivalent": len(equivalent),
           "score": killed / denominator if denominator else float("nan"), "seconds": round(seconds, 1),
           "survivors": survivors, "stale_equivalent": stale}
    if show:
        for name in survivors:
            diff = subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=workdir, env=env,
                                  capture_output=True, text=True).stdout
            print(f"# {name} ({status[name]})\n{diff}")
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| module | mutants | killed | timeouts | survived | no test reaches it | equivalent | score |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['module']}` | {r['mutants']} | {r['killed']} | {r['timeout']} | {r['survived']} | {r['no_tests']} |"
                     f" {r['equivalent']} | {100 * r['score']:.1f}% |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.splitlines()[0])
    p.add_argument("modules", nargs="*", help="module paths, e.g. eval/retrieval_metrics.py")
    p.add_argument("--all", action="store_true", help="every module of MODULE_TESTS")
    p.add_argument("--tests", nargs="+", help="the tests to run against the mutants (default: MODULE_TESTS)")
    p.add_argument("--show", action="store_true", help="print the diff of every surviving mutant")
    p.add_argument("--keep", action="store_true", help="keep the scratch copy (mutmut browse/show there)")
    p.add_argument("--json", help="also write the rows as JSON here")
    args = p.parse_args(argv)
    modules = list(MODULE_TESTS) if args.all else args.modules
    if not modules:
        p.error("name a module or pass --all")
    rows = []
    for module in modules:
        row = run_module(module, args.tests, args.show, args.keep)
        rows.append(row)
        print(f"{module}: {row['killed'] + row['timeout']}/{row['mutants'] - row['equivalent']} killed "
              f"({100 * row['score']:.1f}%) in {row['seconds']:.0f} s", file=sys.stderr)
        if row["stale_equivalent"]:
            print(f"warning: EQUIVALENT names no longer generated: {', '.join(row['stale_equivalent'])}", file=sys.stderr)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
