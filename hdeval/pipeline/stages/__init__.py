"""The pipeline's stages, one module each: a :class:`~hdeval.pipeline.stages.base.Stage` named
``STAGE`` that declares what it reads, writes and which params keys it uses, runs it, and plans
its LLM work. ``python pipelines/<name>.py`` runs one (dvc.yaml's commands);
:mod:`hdeval.pipeline.registry` lists them all. Nothing is imported here, so that a stage's
code deps are the modules it imports itself."""
