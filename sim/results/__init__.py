"""Results: the SQLite result store, hardware sweeps and the Python API (see docs/how-to/sweep.md).

    from sim.results import api
    recs = api.sweep(hw=["a100-sxm4-40gb"], traces=["traces/sample-cnn2-mnist5k"], db="r.sqlite")
    df = pandas.DataFrame(api.records("r.sqlite"))

Submodules are imported on use so `import sim.results` stays cheap (no engines, no Dask).
"""
