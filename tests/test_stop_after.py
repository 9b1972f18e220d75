"""`python -m research.prunetrain.grids --stop-after`: a run stops itself at a wall-clock deadline
and its file is written from its log; a run not started by then is skipped."""
import time

import pytest
import yaml

from research.prunetrain.runs import RunConfig

BASE = dict(dataset="digits", size=8, epochs=4, batch=32, lr=0.1, epoch_steps=3)


def test_deadline_stops_at_the_first_epoch_end_and_writes_the_run(tmp_path):
    from research.prunetrain import grids as pr
    import torch
    torch.set_num_threads(1)
    cfg = RunConfig("resnet20", 0.25, 2, **BASE)
    msg = pr._run_to_file(cfg, tmp_path, tmp_path / "logs", deadline=time.time() + 1e-3)
    assert "after 1 of 4 epochs" in msg
    doc = yaml.safe_load((tmp_path / f"{cfg.name}.yaml").read_text())
    assert len(doc["per_epoch"]) == 1 and "--stop-after" in doc["description"]
    assert list(doc["points"]) == [0]          # no reconfiguration before epoch 2
    # past the deadline, the next run is not started at all
    later = RunConfig("resnet20", 0.2, 2, **BASE)
    assert "not started" in pr._run_to_file(later, tmp_path, tmp_path / "logs",
                                            deadline=time.time() - 1)
    assert not (tmp_path / f"{later.name}.yaml").exists()


@pytest.mark.parametrize("args, err", [(["--stop-after", "10"], "needs --log-dir"),
                                       (["--stop-after", "0", "--log-dir", "x"], "> 0"),
                                       (["--stop-after", "nan", "--log-dir", "x"], "> 0")])
def test_stop_after_refuses_bad_use(args, err, capsys):
    from research.prunetrain import grids as pr
    with pytest.raises(SystemExit):
        pr.main(["--grid", "table1", "--device", "cpu"] + args)
    assert err in capsys.readouterr().err
