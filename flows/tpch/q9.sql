-- TPC-H Q9 (product type profit measure). Changed: comma joins as JOIN ... ON; no ORDER BY.
CREATE MATERIALIZED VIEW q9 AS
SELECT nation, o_year, sum(amount) AS sum_profit
FROM (
  SELECT n_name AS nation, extract(YEAR FROM o_orderdate) AS o_year,
         l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity AS amount
  FROM part
    JOIN lineitem ON p_partkey = l_partkey
    JOIN supplier ON s_suppkey = l_suppkey
    JOIN partsupp ON ps_suppkey = l_suppkey AND ps_partkey = l_partkey
    JOIN orders ON o_orderkey = l_orderkey
    JOIN nation ON s_nationkey = n_nationkey
  WHERE p_name LIKE '%green%'
) AS profit
GROUP BY nation, o_year;
