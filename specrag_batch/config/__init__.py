"""Run configuration: one strict pydantic model (:class:`RunConfig`), loadable from YAML and
overridable by CLI flags; its hash is the identity of a run's results.

=================  =====================================================================
module             what
=================  =====================================================================
``base``          what every section shares (:class:`Section`: strict keys, hash factors)
``model`` ...     one module per section: ``drafter``, ``verifier`` (their ``model`` base),
                   ``retrieval``, ``sampling``, ``selection``, ``drift``, ``reuse``
``run_config``     :class:`RunConfig`: the sections, cross-section checks, the hash
``hashing``        which fields the hash counts, from each section's factors; config differences
``drift``          the ``drift`` section (:class:`DriftConfig`): night-over-night thresholds
``reuse``          the ``reuse`` section (:class:`ReuseConfig`): earlier outputs rows are copied from
``loading``        YAML and overrides to a :class:`RunConfig` (:func:`load_config`)
``errors``         validation errors as one line per field (:func:`read_run_config`)
=================  =====================================================================
"""

from .drift import MEASURE_FAMILIES, DriftConfig
from .errors import ConfigError, explain_config_error, note_sources, read_run_config
from .hashing import ADDED_FIELDS, SWITCHED_FIELDS, UNHASHED_SECTIONS, config_differences, hashed_view
from .loading import load_config, validate_run_config
from .reuse import ReuseConfig
from .run_config import RunConfig
from .base import DEFAULT_CLAIM_LABELS, REFLECTION_QUESTION, Mode, Section, TauTask
from .drafter import DrafterConfig
from .model import ANSWER_MARKER_ROOM, DEFAULT_DRAFTER, DEFAULT_VERIFIER, MIN_PROMPT_ROOM, ModelConfig
from .retrieval import RetrievalConfig
from .sampling import SamplingConfig
from .selection import SelectionConfig
from .verifier import VerifierConfig

__all__ = ["ADDED_FIELDS", "ANSWER_MARKER_ROOM", "DEFAULT_CLAIM_LABELS", "DEFAULT_DRAFTER",
           "DEFAULT_VERIFIER", "MEASURE_FAMILIES", "MIN_PROMPT_ROOM", "REFLECTION_QUESTION", "SWITCHED_FIELDS",
           "UNHASHED_SECTIONS", "ConfigError", "DriftConfig", "DrafterConfig", "Mode", "ModelConfig",
           "RetrievalConfig", "ReuseConfig", "RunConfig", "SamplingConfig", "Section", "SelectionConfig", "TauTask", "VerifierConfig",
           "config_differences", "explain_config_error", "hashed_view", "load_config", "note_sources",
           "read_run_config", "validate_run_config"]
