"""The stand-in Unity player: serves any ``BaseEnv`` over the real ML-Agents protocol.

Run it with ``python -m unity_sb3.scenes.player SCENE --mlagents-port PORT``. Nothing is imported here, so ``python -m`` does not import the server twice."""
