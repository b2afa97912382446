"""SB3 algorithm classes and plugins: reward signals, behavioral cloning, POCA."""
