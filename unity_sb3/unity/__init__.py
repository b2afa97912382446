"""Everything that talks to Unity. The only subpackage that imports ``mlagents_envs``."""

from unity_sb3.unity import compat as _compat  # noqa: F401  (must run before mlagents_envs imports)
