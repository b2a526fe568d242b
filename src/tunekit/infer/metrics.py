"""Similarity scores of generated text against labels, computed exactly as LLaMA-Factory's ``ComputeSimilarity``
(so numbers compare across the two tools), plus exact match.

Per sample: ROUGE-1/2/L F1 over jieba tokens (jieba segments Chinese into words and splits English on
spaces/punctuation; whitespace tokens vanish when joined), 0 when either side has no token; BLEU-4 over
characters with NLTK's smoothing method 3. All scores are percentages (x 100, 4 decimals), averaged over samples.
"""

from __future__ import annotations

import logging

from ..config.problems import Said
from ..errors import EnvironmentProblem


def _imports():
    try:
        import jieba
        from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
        from rouge_chinese import Rouge
    except ImportError as exc:
        raise EnvironmentProblem(Said("metrics_packages", name=str(exc.name))) from None
    jieba.setLogLevel(logging.WARNING)
    return jieba, sentence_bleu, SmoothingFunction, Rouge


def sample_scores(pred: str, label: str) -> dict[str, float]:
    jieba, sentence_bleu, SmoothingFunction, Rouge = _imports()
    hypothesis, reference = list(jieba.cut(pred)), list(jieba.cut(label))
    scores: dict[str, float] = {}
    if not " ".join(hypothesis).split() or not " ".join(reference).split():
        scores.update({"rouge-1": 0.0, "rouge-2": 0.0, "rouge-l": 0.0})
    else:
        result = Rouge().get_scores(" ".join(hypothesis), " ".join(reference))[0]
        scores.update({k: round(v["f"] * 100, 4) for k, v in result.items()})
    bleu = sentence_bleu([list(label)], list(pred), smoothing_function=SmoothingFunction().method3)
    scores["bleu-4"] = round(bleu * 100, 4)
    scores["exact_match"] = 100.0 if pred.strip() == label.strip() else 0.0
    return scores


def score_predictions(preds: list[str], labels: list[str]) -> dict[str, float]:
    """Mean of each per-sample score: ``bleu-4``, ``rouge-1``, ``rouge-2``, ``rouge-l``, ``exact_match``."""
    if len(preds) != len(labels):
        raise ValueError(f"{len(preds)} predictions for {len(labels)} labels")
    if not preds:
        return {}
    per = [sample_scores(pred, label) for pred, label in zip(preds, labels)]
    return {
        k: round(sum(s[k] for s in per) / len(per), 4)
        for k in ("bleu-4", "rouge-1", "rouge-2", "rouge-l", "exact_match")
    }
