"""Environments as a first-class thing: the hashed lock (:mod:`.lock`: ``requirements.lock``, its check and
the mark an environment built from it carries, :mod:`.lock_marker`), making a virtualenv per release
(:mod:`.venv`: ``batchperf env make``) and its release pins (:mod:`.pins`).

Standard library only, and nothing of ``batchperf`` outside this package: ``python -m batchperf.envs.lock`` runs
with the system interpreter before any environment exists (``make setup``)."""
