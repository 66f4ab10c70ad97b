"""The parts of bench/world_scale.py: `rows`, `data`, `metrics`, `training`, `report`
(bench/README.md, section `world_scale.py`). Named `bench/world/`, not `bench/world_scale/`: a
package of the script's own name would shadow the script's module (`import bench.world_scale`
would find the package).
"""
