"""Run output: fields.h5 and fields.xdmf, the PNG, run.json and forces.csv."""
