"""Airflow 3 DAGs for every cbp pipeline in flows/, and the crawl-queue crawler (see dags/cbp.yaml).

Start Airflow with this folder as its DAGs folder (docs/howto/airflow.md); the factory is cbp.airflow.dagfactory.
"""

import os

from cbp.airflow.dagfactory import make_dags

_CONFIG = os.environ.get("CBP_DAGS_CONFIG", os.path.join(os.path.dirname(os.path.abspath(__file__)), "cbp.yaml"))

globals().update(make_dags(_CONFIG))
