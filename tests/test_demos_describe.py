"""`unity-sb3 demo-info` and describe_demo on the real Unity recordings."""

from __future__ import annotations

import pytest

from unity_sb3.cli import main
from unity_sb3.demos.reader import DemoFormatError, describe_demo


@pytest.mark.parametrize(
    ("name", "facts"),
    [
        (
            "Expert3DBall.demo",
            [
                "behavior '3DBallLearning'",
                "549 records",
                "shape (8,)",
                "continuous, 2 values",
                "records: 549",
            ],
        ),
        (
            "ExpertBasic.demo",
            [
                "'BasicLearning'",
                "discrete, 1 branch of sizes (3,)",
                "11 episodes in the metadata",
                "10 terminal",
            ],
        ),
        (
            "ExpertPyramid.demo",
            [
                "team: 0 (base behavior 'Pyramids')",
                "27 trailing bytes",
                "10 distinct agent ids",
                "shape (4,)",
            ],
        ),
        ("testdcvis.demo", ["shape (84, 84, 3), visual", "4 branches of sizes (3, 3, 3, 2)"]),
        (
            "testhybridvis.demo",
            ["hybrid: 3 continuous + discrete branches (2,)", "'CameraSensor': shape (3, 84, 84)"],
        ),
    ],
)
def test_demo_info_command_on_real_demos(
    demo_dir, capsys: pytest.CaptureFixture, name: str, facts: list[str]
) -> None:
    assert main(["demo-info", str(demo_dir / name)]) == 0
    out = capsys.readouterr().out
    for fact in facts:
        assert fact in out, (fact, out)
    assert "mean reward (metadata)" in out


def test_describe_demo_mean_reward_and_episodes(demo_dir) -> None:
    text = describe_demo(demo_dir / "Expert3DBall.demo")
    assert "mean reward (metadata): 54.8" in text
    assert "1 unfinished" in text  # the recording stopped mid-episode


def test_describe_demo_of_a_broken_file(tmp_path) -> None:
    path = tmp_path / "broken.demo"
    path.write_bytes(b"\x05abc")
    with pytest.raises(DemoFormatError):
        describe_demo(path)
