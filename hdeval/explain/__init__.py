"""Explanations of an aggregator (HD-Eval §4.4), in two parts with different dependencies.

* :mod:`hdeval.explain.runtime` (production, ``hdeval score --explain``): each predicted aspect
  score split into a base value plus one contribution per feature column, such that
  ``base + sum(contributions) == prediction``; interventional Shapley values against the
  background rows stored with the bundle. numpy and the ONNX aggregator only.
* :mod:`hdeval.explain.shap_report` (training side): SHAP values of a fitted scikit-learn
  aggregator per aspect with a model-appropriate explainer, beeswarm and bar plots, and the
  permutation-importance chart; shap, matplotlib and scikit-learn are imported inside.
"""
