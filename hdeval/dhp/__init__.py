"""DHP (Wang et al.): perturb good texts, test whether a scorer notices, accept or refuse it.

- :mod:`~hdeval.dhp.text`, :mod:`~hdeval.dhp.perturbation`, :mod:`~hdeval.dhp.rules`,
  :mod:`~hdeval.dhp.content_rules`, :mod:`~hdeval.dhp.llm_perturbation` and
  :mod:`~hdeval.dhp.catalogue`: the perturbations and each task's set;
- :mod:`~hdeval.dhp.statistics` and :mod:`~hdeval.dhp.weights`: Wilcoxon, harmonic mean p,
  discernment, expert weights;
- :mod:`~hdeval.dhp.originals` and :mod:`~hdeval.dhp.benchmark`: the texts to perturb, and one
  scorer through the benchmark;
- :mod:`~hdeval.dhp.runner`: several scorers, tables and charts, and the acceptance gate.
"""
