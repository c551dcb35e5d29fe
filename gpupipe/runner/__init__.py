"""Execution on a Dask cluster: `plan` (segments), `run` (the whole run), `segments` and
`steps` (checkpointed tasks), `resume` (fingerprints), `sharding` (the shards phase), `cluster`
(the backend and the cluster), `walk` (row stages on one frame), `stats` (run.json)."""
