"""`prunesim validate`: every published result of VALIDATION.md A-D and HARDWARE.md §3, computed.

One module per section, each yielding report.Row values: ye (A: Ye et al. 2020, CPUs), wang (B:
Wang et al. 2019, TITAN Xp), prunetrain (C: PruneTrain, Lym et al. 2019), sdgp (D: McDanel et al.
2022, A100), hardware (HARDWARE.md §3 GEMMs), literature (T: Hu et al. 2024), silicon (S: a lent
H100); report holds the row type, the group registry, compute() and the report output.

Row groups (rough cost on one core, 2-core machine shared): tensor-core rows (D, HW3) ~2 s;
PruneTrain (C) ~15 s quick / ~1 min full; Wang's patch engine (B) ~10 s; Ye's densities and CPU
speedups (A) ~35 s quick (ResNet-18, AlexNet) / several minutes full (all five networks)."""
from __future__ import annotations

from .report import (GROUPS, HEAVY_FIRST, REPO, REPORT_TITLE, SECTION_TITLES, Row, _err, _fail,
                     _fmt, cmd_validate, compute, default_jobs, is_validation_report, markdown,
                     print_table)
from .hardware import PUB_HW3, PUB_HW3_MLP, rows_hw3
from .literature import PUB_T_HU24_FFN, rows_t_literature
from .prunetrain import (AUTHORS_DIR, BATCH_RULE_ORDER, CIFAR_GPU, FIRST_CE_FILE, IMAGENET_GPU,
                         PUB_C_BATCH, PUB_C_LASSO_COEFF, PUB_C_TABLE1, PUB_C_TABLE4, RERUNS_DIR,
                         _authors_setting, _authors_shaped, _c_authors_rows, _c_batch_rule_rows,
                         _c_classifier_floor_rows, _c_clock_rows, _c_course_rows,
                         _c_decay_pair_rows, _c_first_ce_init_rows, _c_first_ce_row,
                         _c_lasso_coeff_rows, _c_measured_held_out_rows, _c_measured_rows,
                         _c_other_setting_rows, _c_rerun_rows, _c_stage_spread_rows,
                         _c_table4_rows, _c_labels40_rows, _c_third_party_rows,
                         _c_v100_measured_rows, _c_weak_lasso_rows, _mean_at, _past_last_decay,
                         _pt_method, _run_step_seconds, _settled, _train_flops_frac, _v100_runs,
                         rows_c, labels40_run_files)
from .sdgp import (PUB_D_ACCURACY, PUB_D_NM_ACCURACY, rows_d_accuracy, rows_d_tensorcore,
                   rows_d_whole_step)
from .silicon import _silicon, rows_s_silicon
from .wang import BUNDLED_TRACE, rows_b
from .ye import rows_a
